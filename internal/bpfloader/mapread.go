package bpfloader

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// batchEntries is how many entries one batch lookup asks for. Each read of
// a map entry by entry costs two syscalls (MAP_GET_NEXT_KEY, then the
// lookup); a batch returns this many entries in one, which on a node with
// a few thousand cgroups was most of the probes' read.
const batchEntries = 512

// mapReader reads every entry of a map: in batches (BPF_MAP_LOOKUP_BATCH)
// where the kernel has them for the map's type, entry by entry otherwise.
// Its buffers are kept from one read to the next.
type mapReader[K, V any] struct {
	keys []K
	vals []V
	// iterate is set once a batch lookup was refused as unsupported: the
	// kernel or the map type has none.
	iterate bool
}

// each calls fn for every entry of m; fn must not keep the pointers. A
// hash map's batch lookup is consistent per bucket, as the entry-by-entry
// read is per entry: an entry added or deleted during the read may be
// missed or seen, in both.
func (r *mapReader[K, V]) each(m *ebpf.Map, fn func(*K, *V)) error {
	if !r.iterate {
		err := r.batched(m, fn)
		if !errors.Is(err, errNoBatch) {
			return err
		}
		r.iterate = true
	}
	var k K
	var v V
	it := m.Iterate()
	for it.Next(&k, &v) {
		fn(&k, &v)
	}
	return it.Err()
}

// errNoBatch says the first batch lookup was refused as unsupported,
// before any entry was read.
var errNoBatch = errors.New("no batch lookup")

func (r *mapReader[K, V]) batched(m *ebpf.Map, fn func(*K, *V)) error {
	if r.keys == nil {
		n := min(batchEntries, int(max(m.MaxEntries(), 1)))
		r.keys, r.vals = make([]K, n), make([]V, n)
	}
	var cursor ebpf.MapBatchCursor
	first := true
	for {
		n, err := m.BatchLookup(&cursor, r.keys, r.vals, nil)
		if first && errors.Is(err, ebpf.ErrNotSupported) {
			return errNoBatch
		}
		first = false
		for i := 0; i < n; i++ {
			fn(&r.keys[i], &r.vals[i])
		}
		switch {
		case errors.Is(err, ebpf.ErrKeyNotExist):
			return nil // the end, after the last n entries
		case errors.Is(err, unix.ENOSPC) && len(r.keys) < int(m.MaxEntries()):
			// A hash map's batch stops at a bucket's end; a bucket with more
			// entries than the batch has room for is refused whole, and the
			// cursor stays at that bucket.
			n := min(2*len(r.keys), int(m.MaxEntries()))
			r.keys, r.vals = make([]K, n), make([]V, n)
		case err != nil:
			return fmt.Errorf("batch lookup %s: %w", m, err)
		}
	}
}

// deleteAll deletes keys from m: in batches (BPF_MAP_DELETE_BATCH) where
// the kernel has them, one syscall per key otherwise. A key already gone is
// no error. On a node that forks all the time, the final reads of ended
// processes made one delete syscall each per read.
func deleteAll[K any](m *ebpf.Map, keys []K) error {
	for len(keys) > 0 {
		n, err := m.BatchDelete(keys, nil)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ebpf.ErrKeyNotExist) && n < len(keys):
			// The batch stops at the first key it can't delete: keys[n].
			keys = keys[n+1:]
		case errors.Is(err, ebpf.ErrNotSupported):
			for i := range keys {
				if err := m.Delete(&keys[i]); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
					return fmt.Errorf("delete from %s: %w", m, err)
				}
			}
			return nil
		default:
			return fmt.Errorf("batch delete from %s: %w", m, err)
		}
	}
	return nil
}
