// Package store keeps units, their figures and the usage rolled up from
// them, in SQLite (the default: modernc.org/sqlite, pure Go, one file) or
// PostgreSQL (pgx). Both are reached through database/sql and share every
// query but the schema, which goose migrates (migrations/<dialect>).
//
// Tables:
//   - units: one row per unit: what its manager says, its figures so far
//     (scalar columns, energy and emissions per zone as JSON) and its status.
//   - unit_series: per unit, the last value and time of each TSDB series
//     counted into it, so an update cycle adds exactly the increase since
//     the previous one, also across restarts.
//   - usage_daily: the sum of the units that started on one UTC day per
//     user, project, cluster and kind: usage over a year reads at most 366
//     rows per user and project instead of every unit. Each write of a unit
//     replaces its old contribution with its new one in the same
//     transaction, so the rollup always equals the sum of the units.
//   - members: which users were seen in which projects (Projects, Users).
//   - cursors: how far each feeder (the TSDB updater, sacct) has read.
//
// One process writes (the API server's updater and Slurm feeder); writes
// are serialised by a mutex and each is one transaction. Reads are
// concurrent.
package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/pressly/goose/v3"
	_ "modernc.org/sqlite" // database/sql driver "sqlite"

	"github.com/wattrace/wattrace/pkg/units"
)

//go:embed migrations
var migrations embed.FS

// Drivers the store speaks.
const (
	SQLite   = "sqlite"
	Postgres = "postgres"
)

// Config says which database to open.
type Config struct {
	// Driver is SQLite (default) or Postgres.
	Driver string
	// Path is the SQLite file (required for SQLite).
	Path string
	// DSN is the PostgreSQL connection string (required for Postgres),
	// e.g. "postgres://wattrace@db/wattrace?sslmode=verify-full".
	DSN string
	// Now is the clock (tests); time.Now when nil.
	Now func() time.Time
}

// Store is the units database. Its methods are safe for concurrent use.
type Store struct {
	db     *sql.DB
	driver string
	now    func() time.Time
	// wmu serialises writers: SQLite allows one writer at a time, and
	// the rollup's read-modify-write needs it on PostgreSQL too.
	wmu sync.Mutex
}

var _ units.Reader = (*Store)(nil)

// Open opens (creating if needed) the database and migrates it to the
// newest schema.
func Open(ctx context.Context, c Config) (*Store, error) {
	s := &Store{driver: c.Driver, now: c.Now}
	if s.driver == "" {
		s.driver = SQLite
	}
	if s.now == nil {
		s.now = time.Now
	}
	var (
		db  *sql.DB
		err error
	)
	switch s.driver {
	case SQLite:
		if c.Path == "" {
			return nil, errors.New("store: the SQLite file path is required")
		}
		if dir := filepath.Dir(c.Path); dir != "" {
			if _, err := os.Stat(dir); err != nil {
				return nil, fmt.Errorf("store: directory of %s: %w", c.Path, err)
			}
		}
		// WAL lets readers run beside the writer; busy_timeout waits
		// for a lock instead of failing at once.
		dsn := "file:" + c.Path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)"
		db, err = sql.Open("sqlite", dsn)
	case Postgres:
		if c.DSN == "" {
			return nil, errors.New("store: the PostgreSQL DSN is required")
		}
		db, err = sql.Open("pgx", c.DSN)
	default:
		return nil, fmt.Errorf("store: unknown driver %q (allowed: %s, %s)", c.Driver, SQLite, Postgres)
	}
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", s.driver, err)
	}
	s.db = db
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: connect to %s: %w", s.driver, err)
	}
	if err := s.migrate(ctx, dialectOf(s.driver)); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

func dialectOf(driver string) goose.Dialect {
	if driver == Postgres {
		return goose.DialectPostgres
	}
	return goose.DialectSQLite3
}

func (s *Store) migrate(ctx context.Context, dialect goose.Dialect) error {
	sub, err := fs.Sub(migrations, "migrations/"+s.driver)
	if err != nil {
		return fmt.Errorf("store: migrations: %w", err)
	}
	p, err := goose.NewProvider(dialect, s.db, sub)
	if err != nil {
		return fmt.Errorf("store: migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("store: migrate %s: %w", s.driver, err)
	}
	return nil
}

// Version is the schema version the database is at.
func (s *Store) Version(ctx context.Context) (int64, error) {
	var v int64
	err := s.db.QueryRowContext(ctx, "SELECT MAX(version_id) FROM goose_db_version").Scan(&v)
	return v, err
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Driver is the database in use (SQLite or Postgres).
func (s *Store) Driver() string { return s.driver }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	if err := s.db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		return fmt.Errorf("store: ping: %w", err)
	}
	return nil
}

// Backup writes a consistent copy of the database to path while it stays
// online. SQLite only (VACUUM INTO, which reads one snapshot); a
// PostgreSQL site uses pg_dump or a streaming standby (docs/units.md).
func (s *Store) Backup(ctx context.Context, path string) error {
	if s.driver != SQLite {
		return errors.New("store: online backup is for SQLite; back PostgreSQL up with pg_dump or a standby")
	}
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("store: backup %s: file exists", path)
	}
	if _, err := s.db.ExecContext(ctx, "VACUUM INTO ?", path); err != nil {
		return fmt.Errorf("store: backup to %s: %w", path, err)
	}
	return nil
}

// Prune deletes the units that ended before cutoff and whose figures are
// final, their series state, and the usage of the days before cutoff's
// day. It returns how many units it deleted.
func (s *Store) Prune(ctx context.Context, cutoff time.Time) (int64, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	ms := cutoff.UnixMilli()
	var n int64
	err := s.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM unit_series WHERE ref IN
			(SELECT ref FROM units WHERE end_ms > 0 AND end_ms < ? AND status = 'final')`), ms); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, s.q(`DELETE FROM units WHERE end_ms > 0 AND end_ms < ? AND status = 'final'`), ms)
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		_, err = tx.ExecContext(ctx, s.q(`DELETE FROM usage_daily WHERE day < ?`), dayOf(ms))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store: prune before %s: %w", cutoff.UTC().Format(time.RFC3339), err)
	}
	return n, nil
}

// tx runs f in a transaction, committing when it returns nil.
func (s *Store) tx(ctx context.Context, f func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// q rewrites the ? placeholders of a query for the dialect ($1, $2, … on
// PostgreSQL). Queries hold no ? inside literals.
func (s *Store) q(query string) string {
	if s.driver != Postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

const msPerDay = 86400000

// dayOf is the UTC day (days since 1970-01-01) of a Unix millisecond time.
func dayOf(ms int64) int64 {
	if ms < 0 {
		return -((-ms + msPerDay - 1) / msPerDay)
	}
	return ms / msPerDay
}

func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

func timeMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}
