package store

import (
	"database/sql"
	"strconv"
	"strings"
	"testing"
)

// cleanupTB keeps the clean-ups registered through it for later, so that
// a server started inside one test outlives it (run calls them).
type cleanupTB struct {
	testing.TB
	fs []func()
}

func (c *cleanupTB) Cleanup(f func()) { c.fs = append(c.fs, f) }

func (c *cleanupTB) run() {
	for i := len(c.fs) - 1; i >= 0; i-- {
		c.fs[i]()
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func openRaw(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// replaceDB swaps the database name of a postgres:// DSN.
func replaceDB(dsn, name string) string {
	i := strings.LastIndex(dsn, "/")
	j := strings.Index(dsn[i:], "?")
	if j < 0 {
		return dsn[:i+1] + name
	}
	return dsn[:i+1] + name + dsn[i+j:]
}
