package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/prometheus/exporter-toolkit/web"
	"go.yaml.in/yaml/v3"
	"golang.org/x/sys/unix"

	"github.com/wattrace/wattrace/internal/setting"
)

// The web server's keys; its timeouts are declared beside the server
// (run.go).
const (
	KeyWebListenAddress = "web.listen-address"
	KeyWebConfigFile    = "web.config.file"
)

// DefaultListenAddress is the API server's port, next to the exporter's 9841.
const DefaultListenAddress = ":9842"

// Web is the HTTP server: addresses and exporter-toolkit's web config
// (TLS, basic auth). The exporter has settings of the same keys, its own.
type Web struct {
	ListenAddresses []string
	ConfigFile      string
}

// Declare declares web.listen-address and web.config.file, bound to w.
func (w *Web) Declare(s *setting.Set) {
	s.Strings(&w.ListenAddresses, KeyWebListenAddress, []string{DefaultListenAddress}, "Addresses to listen on for the API. Repeatable.").Checked(func() error {
		if len(w.ListenAddresses) == 0 {
			return setting.Invalid(KeyWebListenAddress, "", "at least one address is required")
		}
		var errs []error
		for _, a := range w.ListenAddresses {
			if _, _, err := net.SplitHostPort(a); err != nil {
				errs = append(errs, setting.Invalid(KeyWebListenAddress, a, "want host:port or :port"))
			}
		}
		return errors.Join(errs...)
	})
	s.String(&w.ConfigFile, KeyWebConfigFile, "", "Path to an exporter-toolkit web configuration file that enables TLS, client certificates or basic auth.")
}

// webConfig is web.config.file split in two: its basic_auth_users are
// checked by the API (internal/units/access), which decides per path and per
// credential, and the rest (TLS, client certificates, HTTP headers, rate
// limits) goes to exporter-toolkit. Given the users, exporter-toolkit
// would answer 401 to /health, to bearer tokens and to MUNGE credentials
// before the API saw them, and would let any holder of a password claim
// any user.
type webConfig struct {
	// Users maps basic-auth users to their bcrypt hashes.
	Users map[string]string
	// ToolkitPath is the file exporter-toolkit reads: the original when
	// it has no users (so its certificates and settings reload as
	// exporter-toolkit reloads them), else a private copy without them.
	ToolkitPath string
	copy        *os.File
}

// loadWebConfig reads path (none when ""). The copy lives in memory
// (memfd), named /proc/self/fd/N, with its file paths made absolute: the
// server's file system may be read-only, and nothing else needs to see it.
func loadWebConfig(path string) (*webConfig, error) {
	w := &webConfig{ToolkitPath: path}
	if path == "" {
		return w, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KeyWebConfigFile, err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s %s: %w", KeyWebConfigFile, path, err)
	}
	var users struct {
		Users map[string]string `yaml:"basic_auth_users"`
	}
	if err := yaml.Unmarshal(b, &users); err != nil {
		return nil, fmt.Errorf("%s %s: basic_auth_users: %w", KeyWebConfigFile, path, err)
	}
	if len(users.Users) == 0 {
		if err := web.Validate(path); err != nil {
			return nil, fmt.Errorf("%s %s: %w", KeyWebConfigFile, path, err)
		}
		return w, nil
	}
	w.Users = users.Users
	delete(doc, "basic_auth_users")
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KeyWebConfigFile, err)
	}
	if tls, ok := doc["tls_server_config"].(map[string]any); ok {
		for _, k := range []string{"cert_file", "key_file", "client_ca_file"} {
			if p, ok := tls[k].(string); ok && p != "" && !filepath.IsAbs(p) {
				tls[k] = filepath.Join(dir, p)
			}
		}
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KeyWebConfigFile, err)
	}
	fd, err := unix.MemfdCreate("wattrace-api-web-config", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("%s: a private copy without basic_auth_users: %w", KeyWebConfigFile, err)
	}
	w.copy = os.NewFile(uintptr(fd), "web-config")
	if _, err := w.copy.Write(out); err != nil {
		w.Close()
		return nil, fmt.Errorf("%s: %w", KeyWebConfigFile, err)
	}
	w.ToolkitPath = fmt.Sprintf("/proc/self/fd/%d", fd)
	if err := web.Validate(w.ToolkitPath); err != nil {
		w.Close()
		return nil, fmt.Errorf("%s %s: %w", KeyWebConfigFile, path, err)
	}
	return w, nil
}

// Close releases the private copy.
func (w *webConfig) Close() {
	if w != nil && w.copy != nil {
		_ = w.copy.Close()
		w.copy = nil
	}
}
