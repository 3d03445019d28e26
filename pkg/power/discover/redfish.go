package discover

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/wattrace/wattrace/internal/setting"
	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/power/redfish"
)

// RedfishAuths are power.redfish.auth's values.
var RedfishAuths = []string{"session", "basic"}

// declareRedfish declares power.redfish.*, bound to the client's own
// configuration; redfish.Config.Validate checks it once a URL is set.
func declareRedfish(s *setting.Set, o *redfish.Config) {
	s.String(&o.URL, "power.redfish.url", "", "Redfish BMC base URL, e.g. https://{hostname}-bmc.example.com ({hostname}: this node's short name). Empty: no Redfish.").Checked(func() error {
		if o.URL == "" {
			return nil
		}
		if err := o.Validate(); err != nil {
			// redfish names its settings "redfish.<key>".
			return fmt.Errorf("power.%w", err)
		}
		return nil
	})
	s.String(&o.Chassis, "power.redfish.chassis", "", "Redfish chassis Id. Empty: the first chassis with power data.")
	s.String(&o.Username, "power.redfish.username", "", "Redfish user name.")
	s.String(&o.UsernameFile, "power.redfish.username-file", "", "File holding the Redfish user name.")
	s.String(&o.PasswordFile, "power.redfish.password-file", "", "File holding the Redfish password (never logged).")
	s.String(&o.PasswordEnv, "power.redfish.password-env", "", "Environment variable holding the Redfish password (never logged).")
	s.Enum(&o.Auth, "power.redfish.auth", "session", RedfishAuths, "Redfish authentication: session (token, re-login on expiry; basic where sessions are off) or basic.")
	s.Bool(&o.InsecureSkipVerify, "power.redfish.insecure-skip-verify", false, "Skip verifying the BMC's certificate.")
	s.String(&o.CAFile, "power.redfish.ca-file", "", "CA bundle for the BMC's certificate.")
	s.Duration(&o.Timeout, "power.redfish.timeout", 5*time.Second, "Timeout of one Redfish request.")
	s.String(&o.ExternalURL, "power.redfish.external-url", "", "Send Redfish requests to this proxy (cmd/redfish_proxy) with the BMC address in a header.")
	s.String(&o.ExternalHeader, "power.redfish.external-header", "X-Redfish-Url", "Header carrying the BMC address to the proxy.")
}

func openRedfish(ctx context.Context, e *Env, o *redfish.Config) (power.Meter, string, error) {
	if o.URL == "" {
		return nil, "not configured (power.redfish.url)", nil
	}
	cfg := *o
	open := func(ctx context.Context) (power.Meter, string, error) {
		m, err := redfish.NewMeter(cfg)
		if err != nil {
			// Credentials that cannot be read (a missing password file)
			// are configuration, not a BMC that is down.
			return nil, "", fmt.Errorf("%w: power.%w", ErrConfig, err)
		}
		c, err := e.FirstReading(ctx, m)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", m.Client().BMC(), err)
		}
		return c, m.Client().BMC() + ": " + m.Source(), nil
	}
	m, why, err := open(ctx)
	switch {
	case errors.Is(err, ErrConfig):
		return nil, "", err
	case err != nil:
		return e.Retry("redfish", err, func(ctx context.Context) (power.Meter, error) {
			m, _, err := open(ctx)
			return m, err
		}), "", nil
	}
	return m, why, nil
}
