package store

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/setting"
)

// The store.* block on its own: its defaults pass, each bad value is
// refused naming its key, and the check of store.dsn-file reads the
// connection string the store opens PostgreSQL with.
func TestSettingsCheckNamesTheKey(t *testing.T) {
	dir := t.TempDir()
	dsn := filepath.Join(dir, "dsn")
	if err := os.WriteFile(dsn, []byte("  postgres://u@h/db\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	load := setting.Try[Settings]
	if c, err := load(func(*Settings) {}); err != nil || c.Driver != SQLite || c.Path != "/var/lib/wattrace/units.db" || c.Retention != 2*365*24*time.Hour || c.BackupKeep != 7 {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	for _, tt := range []struct {
		name string
		set  func(c *Settings)
		want string
	}{
		{"driver", func(c *Settings) { c.Driver = "mysql" }, `invalid value "mysql" for store.driver`},
		{"no path", func(c *Settings) { c.Path = "" }, `invalid value "" for store.path: the SQLite file is required`},
		{"postgres without a DSN file", func(c *Settings) { c.Driver = Postgres }, `invalid value "" for store.dsn-file: required with store.driver postgres`},
		{"an empty DSN file", func(c *Settings) { c.Driver, c.DSNFile = Postgres, os.DevNull }, `invalid value "/dev/null" for store.dsn-file: the file is empty`},
		{"negative retention", func(c *Settings) { c.Retention = -time.Hour }, `invalid value "-1h0m0s" for store.retention: must not be negative`},
		{"backups of PostgreSQL", func(c *Settings) { c.Driver, c.DSNFile, c.BackupDir = Postgres, dsn, dir }, `invalid value "` + dir + `" for store.backup.dir: online backups are for SQLite`},
		{"backups into a file", func(c *Settings) { c.BackupDir = dsn }, `invalid value "` + dsn + `" for store.backup.dir: not a directory`},
		{"backups every second", func(c *Settings) { c.BackupDir, c.BackupInterval = dir, time.Second }, `invalid value "1s" for store.backup.interval: at least 1m`},
		{"no backup kept", func(c *Settings) { c.BackupDir, c.BackupKeep = dir, 0 }, `invalid value "0" for store.backup.keep: at least 1`},
	} {
		if _, err := load(tt.set); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
	// Without backups their interval and count do not matter.
	if _, err := load(func(c *Settings) { c.BackupInterval, c.BackupKeep = 0, 0 }); err != nil {
		t.Errorf("no backups: %v", err)
	}
	c, err := load(func(c *Settings) { c.Driver, c.DSNFile = Postgres, dsn })
	if err != nil || c.DSN != "postgres://u@h/db" || c.Key() != KeyDSNFile {
		t.Errorf("PostgreSQL: DSN %q, key %s, %v", c.DSN, c.Key(), err)
	}
}
