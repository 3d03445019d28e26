package store

import (
	"errors"
	"os"
	"strings"
	"time"

	"github.com/wattrace/wattrace/internal/setting"
)

// The store.* keys (wattrace-api's).
const (
	KeyDriver         = "store.driver"
	KeyPath           = "store.path"
	KeyDSNFile        = "store.dsn-file"
	KeyRetention      = "store.retention"
	KeyBackupDir      = "store.backup.dir"
	KeyBackupInterval = "store.backup.interval"
	KeyBackupKeep     = "store.backup.keep"
)

// Drivers are the allowed values of store.driver.
var Drivers = []string{SQLite, Postgres}

// Settings are the store.* settings: the database Open opens, and how the
// program that keeps it (wattrace-api's housekeeping) prunes and backs it
// up.
type Settings struct {
	// Config is what Open takes; its DSN is read from DSNFile by the
	// check of store.dsn-file.
	Config
	// DSNFile holds the PostgreSQL connection string (it may carry a
	// password, so never a flag).
	DSNFile string
	// Retention: units that ended longer ago are deleted (Prune); 0
	// keeps them forever.
	Retention time.Duration
	// BackupDir receives SQLite online backups (Backup); "" takes none.
	BackupDir      string
	BackupInterval time.Duration
	// BackupKeep is how many backups are kept; older ones are deleted.
	BackupKeep int
}

// Declare declares store.*, bound to c. The check of store.dsn-file
// reads the file into c.DSN, so a missing or empty one stops start-up.
func (c *Settings) Declare(s *setting.Set) {
	s.Enum(&c.Driver, KeyDriver, SQLite, Drivers, "Units database: sqlite (one file) or postgres.")
	s.String(&c.Path, KeyPath, "/var/lib/wattrace/units.db", "SQLite database file; its directory must exist.").Checked(func() error {
		if c.Driver == SQLite && c.Path == "" {
			return setting.Invalid(KeyPath, "", "the SQLite file is required")
		}
		return nil
	})
	s.String(&c.DSNFile, KeyDSNFile, "", "File holding the PostgreSQL connection string (postgres://user:password@host/db?sslmode=verify-full); required for postgres.").Checked(c.readDSN)
	s.AnyDuration(&c.Retention, KeyRetention, 2*365*24*time.Hour, "Delete units that ended longer ago, and their daily usage. 0 = keep forever.").Checked(func() error {
		if c.Retention < 0 {
			return setting.Invalid(KeyRetention, c.Retention, "must not be negative")
		}
		return nil
	})
	s.String(&c.BackupDir, KeyBackupDir, "", "Directory for online SQLite backups (units-<time>.db). Empty: none.").Checked(func() error {
		if c.BackupDir == "" {
			return nil
		}
		var errs []error
		if c.Driver == Postgres {
			errs = append(errs, setting.Invalid(KeyBackupDir, c.BackupDir, "online backups are for SQLite; back PostgreSQL up with pg_dump or a standby"))
		}
		if fi, err := os.Stat(c.BackupDir); err != nil || !fi.IsDir() {
			errs = append(errs, setting.Invalid(KeyBackupDir, c.BackupDir, "not a directory"))
		}
		return errors.Join(errs...)
	})
	s.AnyDuration(&c.BackupInterval, KeyBackupInterval, 24*time.Hour, "Time between online backups.").Checked(func() error {
		if c.BackupDir != "" && c.BackupInterval < time.Minute {
			return setting.Invalid(KeyBackupInterval, c.BackupInterval, "at least 1m")
		}
		return nil
	})
	s.AnyInt(&c.BackupKeep, KeyBackupKeep, 7, "Backups kept in store.backup.dir; older ones are deleted.").Checked(func() error {
		if c.BackupDir != "" && c.BackupKeep < 1 {
			return setting.Invalid(KeyBackupKeep, c.BackupKeep, "at least 1")
		}
		return nil
	})
}

// readDSN reads store.dsn-file into DSN when the driver is PostgreSQL.
func (c *Settings) readDSN() error {
	if c.Driver != Postgres {
		return nil
	}
	if c.DSNFile == "" {
		return setting.Invalid(KeyDSNFile, "", "required with store.driver postgres")
	}
	b, err := os.ReadFile(c.DSNFile)
	if err != nil {
		return setting.Invalid(KeyDSNFile, c.DSNFile, err.Error())
	}
	if c.DSN = strings.TrimSpace(string(b)); c.DSN == "" {
		return setting.Invalid(KeyDSNFile, c.DSNFile, "the file is empty")
	}
	return nil
}

// Key is the setting that names the database of c (store.path for
// SQLite, store.dsn-file for PostgreSQL): the key an error opening it
// names.
func (c *Settings) Key() string {
	if c.Driver == Postgres {
		return KeyDSNFile
	}
	return KeyPath
}
