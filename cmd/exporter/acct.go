package main

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"time"

	"github.com/wattrace/wattrace/internal/units/acct"
)

// runAcct is `wattrace acct`: the calling user's jobs from the units API.
// It runs with the user's own rights only: the credential (MUNGE, a token,
// the user's certificate) proves who the user is, so no setuid or setgid
// bit is needed, and one left over from an old install (which let the
// command read a group's files for the user) is refused.
func runAcct(ctx context.Context, args []string, std stdio) int {
	if os.Geteuid() != os.Getuid() || os.Getegid() != os.Getgid() {
		fmt.Fprintln(std.err, "wattrace acct: refusing to run setuid or setgid: remove the bit (chmod ug-s); acct authenticates with MUNGE, a token or your own certificate")
		return 1
	}
	env := acct.Env{Getenv: os.Getenv, Now: time.Now, Location: time.Local}
	if u, err := user.LookupId(strconv.Itoa(os.Getuid())); err == nil {
		env.User = u.Username
	}
	return acct.Run(ctx, args, std.out, std.err, env)
}
