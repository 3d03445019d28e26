package api

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
)

func TestIdentifyExported(t *testing.T) {
	a := &Access{UserHeader: "X-Grafana-User", TrustedNetworks: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}, Admins: []string{"root"}}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	r.Header.Set("X-Grafana-User", "root")
	if c, err := a.Identify(r); err != nil || c != (Caller{User: "root", Admin: true}) {
		t.Errorf("trusted admin: %+v %v", c, err)
	}
	r.RemoteAddr = "198.51.100.1:1234"
	_, err := a.Identify(r)
	var hs interface{ HTTPStatus() int }
	if !errors.As(err, &hs) || hs.HTTPStatus() != http.StatusForbidden {
		t.Errorf("untrusted network: %v", err)
	}
}
