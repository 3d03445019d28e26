package main

import (
	"context"
	"os"
	"os/user"
	"strconv"
	"syscall"
	"time"

	"github.com/wattrace/wattrace/pkg/units/acct"
)

// runAcct is `wattrace acct`: the calling user's jobs from the units API.
// The process's real uid names the user (a setgid install changes only
// the group); when the effective group differs from the real one, the
// group is dropped as soon as the client configuration is read.
func runAcct(ctx context.Context, args []string, std stdio) int {
	env := acct.Env{
		Getenv:     os.Getenv,
		Now:        time.Now,
		Location:   time.Local,
		Privileged: os.Getegid() != os.Getgid(),
		DropPrivileges: func() error {
			gid := os.Getgid()
			if os.Getegid() == gid {
				return nil
			}
			return syscall.Setresgid(gid, gid, gid)
		},
	}
	if u, err := user.LookupId(strconv.Itoa(os.Getuid())); err == nil {
		env.User = u.Username
	}
	return acct.Run(ctx, args, std.out, std.err, env)
}
