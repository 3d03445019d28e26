package guard

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// scopeCache keeps each user's projects and VMs for a short while: a
// dashboard sends tens of queries at once, and each would otherwise ask
// the store. A unit that starts is seen by its user's queries within ttl.
type scopeCache struct {
	src Scopes
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	entries map[cacheKey]cacheEntry
}

type cacheKey struct {
	user string
	src  Source
}

type cacheEntry struct {
	vals []string
	at   time.Time
}

// maxCacheEntries bounds the cache; beyond it, expired entries are
// dropped, then everything (a burst of distinct users only costs store
// lookups).
const maxCacheEntries = 10000

func newScopeCache(src Scopes, ttl time.Duration, now func() time.Time) *scopeCache {
	return &scopeCache{src: src, ttl: ttl, now: now, entries: map[cacheKey]cacheEntry{}}
}

// get returns a user's values of src (projects or VMs).
func (c *scopeCache) get(ctx context.Context, user string, src Source) ([]string, error) {
	k := cacheKey{user, src}
	now := c.now()
	c.mu.Lock()
	e, ok := c.entries[k]
	c.mu.Unlock()
	if ok && now.Sub(e.at) < c.ttl {
		return e.vals, nil
	}
	var vals []string
	var err error
	switch src {
	case SourceProjects:
		vals, err = c.src.Projects(ctx, user)
	case SourceVMs:
		vals, err = c.src.VMs(ctx, user)
	default:
		return nil, fmt.Errorf("guard: no store lookup for source %q", src)
	}
	if err != nil {
		return nil, fmt.Errorf("guard: %s of %s: %w", src, user, err)
	}
	vals = slices.Clone(vals)
	slices.Sort(vals)
	vals = slices.Compact(vals)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= maxCacheEntries {
		for k, e := range c.entries {
			if now.Sub(e.at) >= c.ttl {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= maxCacheEntries {
			clear(c.entries)
		}
	}
	c.entries[k] = cacheEntry{vals: vals, at: now}
	return vals, nil
}
