package hostshare

import (
	"os"
	"path/filepath"
	"testing"
)

// WriteAtomic syncs the new file while its name is still the temporary
// one (the target still holds the old content), and the directory once
// the rename is done (the target holds the new content): the order that
// makes both the content and the rename survive a crash.
func TestWriteAtomicSyncsFileThenDirectory(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "package_energy_uj")
	if err := os.WriteFile(target, []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	type call struct {
		path, target string
	}
	var calls []call
	prev := syncFile
	t.Cleanup(func() { syncFile = prev })
	syncFile = func(f *os.File) error {
		b, err := os.ReadFile(target)
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, call{f.Name(), string(b)})
		return prev(f)
	}
	if err := WriteAtomic(dir, "package_energy_uj", []byte("2")); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 {
		t.Fatalf("syncs %+v, want the file's then the directory's", calls)
	}
	if c := calls[0]; filepath.Dir(c.path) != dir || filepath.Base(c.path) == "package_energy_uj" || c.target != "1\n" {
		t.Errorf("first sync %+v: want the temporary file, before the rename (target still \"1\\n\")", c)
	}
	if c := calls[1]; c.path != dir || c.target != "2\n" {
		t.Errorf("second sync %+v: want the directory %s, after the rename (target \"2\\n\")", c, dir)
	}
	if b, _ := os.ReadFile(target); string(b) != "2\n" {
		t.Errorf("content %q", b)
	}
}
