package testenv

import (
	"testing"

	"golang.org/x/sys/unix"
)

// BPFFS mounts a BPF file system of the test's own (each mount is a new
// instance, empty, mode 1777 as the kernel makes it) and unmounts it when
// the test ends, releasing whatever was pinned there.
func BPFFS(t testing.TB) string {
	t.Helper()
	RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("bpf", dir, "bpf", 0, ""); err != nil {
		Need(t, "mount a BPF file system on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}
