package store

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/wattrace/wattrace/pkg/units"
)

// where builds a conjunction of conditions with their arguments.
type where struct {
	conds []string
	args  []any
}

func (w *where) add(cond string, args ...any) {
	w.conds = append(w.conds, cond)
	w.args = append(w.args, args...)
}

// in adds "col IN (…)" for a non-empty list.
func (w *where) in(col string, vals []string) {
	if len(vals) == 0 {
		return
	}
	w.conds = append(w.conds, col+" IN ("+placeholders(len(vals))+")")
	for _, v := range vals {
		w.args = append(w.args, v)
	}
}

func (w *where) String() string {
	if len(w.conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(w.conds, " AND ")
}

func kindStrings(ks []units.Kind) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = string(k)
	}
	return out
}

// maxList bounds the values of one filter field, keeping every query
// below the databases' limits on bound parameters.
const maxList = 1000

func checkLists(lists ...[]string) error {
	for _, l := range lists {
		if len(l) > maxList {
			return fmt.Errorf("%w: at most %d values per filter", units.ErrInvalid, maxList)
		}
	}
	return nil
}

// Units returns the units the filter selects, newest start first.
func (s *Store) Units(ctx context.Context, f units.Filter) ([]units.Unit, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if err := checkLists(f.Users, f.Projects, f.Clusters, f.IDs, kindStrings(f.Kinds)); err != nil {
		return nil, err
	}
	var w where
	w.in("usr", f.Users)
	w.in("project", f.Projects)
	w.in("cluster", f.Clusters)
	w.in("kind", kindStrings(f.Kinds))
	w.in("unit_id", f.IDs)
	if !f.To.IsZero() {
		w.add("start_ms < ?", f.To.UnixMilli())
	}
	if !f.From.IsZero() {
		w.add("(end_ms = 0 OR end_ms >= ?)", f.From.UnixMilli())
	}
	if f.Running != nil {
		if *f.Running {
			w.add("end_ms = 0 AND start_ms > 0")
		} else {
			w.add("(end_ms > 0 OR start_ms = 0)")
		}
	}
	limit := f.Limit
	if limit == 0 {
		limit = units.DefaultLimit
	}
	query := "SELECT " + unitColumns + " FROM units" + w.String() + " ORDER BY start_ms DESC, ref DESC LIMIT ? OFFSET ?"
	rows, err := s.db.QueryContext(ctx, s.q(query), append(w.args, limit, f.Offset)...)
	if err != nil {
		return nil, fmt.Errorf("store: units: %w", err)
	}
	defer rows.Close()
	out := []units.Unit{}
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return nil, fmt.Errorf("store: units: %w", err)
		}
		out = append(out, r.unit())
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: units: %w", err)
	}
	return out, nil
}

// Unit returns one unit.
func (s *Store) Unit(ctx context.Context, k units.Key) (units.Unit, error) {
	if k.ID == "" {
		return units.Unit{}, fmt.Errorf("%w: a unit id is required", units.ErrInvalid)
	}
	var w where
	w.add("unit_id = ?", k.ID)
	if k.Cluster != "" {
		w.add("cluster = ?", k.Cluster)
	}
	if k.Kind != "" {
		w.add("kind = ?", string(k.Kind))
	}
	rows, err := s.db.QueryContext(ctx, s.q("SELECT "+unitColumns+" FROM units"+w.String()+" LIMIT 2"), w.args...)
	if err != nil {
		return units.Unit{}, fmt.Errorf("store: unit %s: %w", k.ID, err)
	}
	defer rows.Close()
	var found []units.Unit
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return units.Unit{}, fmt.Errorf("store: unit %s: %w", k.ID, err)
		}
		found = append(found, r.unit())
	}
	if err := rows.Err(); err != nil {
		return units.Unit{}, fmt.Errorf("store: unit %s: %w", k.ID, err)
	}
	switch len(found) {
	case 0:
		return units.Unit{}, fmt.Errorf("%w: %s", units.ErrNotFound, k.ID)
	case 1:
		return found[0], nil
	}
	return units.Unit{}, fmt.Errorf("%w: %s (give cluster and kind)", units.ErrAmbiguous, k.ID)
}

// Owned reports whether user owns every one of keys.
func (s *Store) Owned(ctx context.Context, user string, keys []units.Key) (bool, error) {
	if len(keys) == 0 {
		return false, fmt.Errorf("%w: no units to verify", units.ErrInvalid)
	}
	ids := make([]string, 0, len(keys))
	for _, k := range keys {
		ids = append(ids, k.ID)
	}
	if err := checkLists(ids); err != nil {
		return false, err
	}
	var w where
	w.in("unit_id", ids)
	rows, err := s.db.QueryContext(ctx, s.q("SELECT cluster, kind, unit_id, usr FROM units"+w.String()), w.args...)
	if err != nil {
		return false, fmt.Errorf("store: owned: %w", err)
	}
	defer rows.Close()
	type found struct{ cluster, kind, user string }
	byID := map[string][]found{}
	for rows.Next() {
		var f found
		var id string
		if err := rows.Scan(&f.cluster, &f.kind, &id, &f.user); err != nil {
			return false, fmt.Errorf("store: owned: %w", err)
		}
		byID[id] = append(byID[id], f)
	}
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("store: owned: %w", err)
	}
	for _, k := range keys {
		matched := false
		for _, f := range byID[k.ID] {
			if (k.Cluster != "" && k.Cluster != f.cluster) || (k.Kind != "" && string(k.Kind) != f.kind) {
				continue
			}
			if f.user != user {
				return false, nil
			}
			matched = true
		}
		if !matched {
			return false, nil
		}
	}
	return true, nil
}

// countMs is the SQL of the time a unit counts at in usage: its start,
// else its submission, first sample or last update (row.day's order).
const countMs = `CASE WHEN start_ms <> 0 THEN start_ms WHEN submit_ms <> 0 THEN submit_ms
	WHEN first_ms <> 0 THEN first_ms ELSE updated_ms END`

// Usage sums the units that started in [From, To): the usage_daily rows
// of the UTC days wholly inside the range, and the units themselves on
// the days it covers in part (at most two, since a range that starts or
// ends within a day must not take the rest of that day's units).
func (s *Store) Usage(ctx context.Context, q units.UsageQuery) ([]units.Usage, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if err := checkLists(q.Users, q.Projects, q.Clusters, kindStrings(q.Kinds)); err != nil {
		return nil, err
	}
	if len(q.Within) > maxList {
		return nil, fmt.Errorf("%w: at most %d (cluster, project) pairs", units.ErrInvalid, maxList)
	}
	var w where
	w.in("usr", q.Users)
	w.in("project", q.Projects)
	w.in("cluster", q.Clusters)
	w.in("kind", kindStrings(q.Kinds))
	if len(q.Within) > 0 {
		pairs := make([]string, len(q.Within))
		args := make([]any, 0, 2*len(q.Within))
		for i, cp := range q.Within {
			pairs[i] = "(cluster = ? AND project = ?)"
			args = append(args, cp.Cluster, cp.Project)
		}
		w.add("("+strings.Join(pairs, " OR ")+")", args...)
	}
	fromMs, toMs := q.From.UnixMilli(), q.To.UnixMilli()
	// Whole days: [fullFrom, fullTo] (none when fullFrom > fullTo).
	fullFrom := dayOf(fromMs + msPerDay - 1)
	fullTo := dayOf(toMs) - 1
	var parts [][2]int64 // [from, to) ms read from the units
	if fullFrom > fullTo {
		parts = append(parts, [2]int64{fromMs, toMs})
	} else {
		if fromMs < fullFrom*msPerDay {
			parts = append(parts, [2]int64{fromMs, fullFrom * msPerDay})
		}
		if toMs > (fullTo+1)*msPerDay {
			parts = append(parts, [2]int64{(fullTo + 1) * msPerDay, toMs})
		}
	}
	u := newUsageSum(q)
	if fullFrom <= fullTo {
		dw := w
		dw.conds = append([]string(nil), w.conds...)
		dw.args = append([]any(nil), w.args...)
		dw.add("day >= ? AND day <= ?", fullFrom, fullTo)
		if err := s.usageDays(ctx, dw, u); err != nil {
			return nil, err
		}
	}
	for _, pt := range parts {
		if pt[0] >= pt[1] {
			continue
		}
		pw := w
		pw.conds = append([]string(nil), w.conds...)
		pw.args = append([]any(nil), w.args...)
		// start_ms bounds let the start index serve the usual case.
		pw.add("((start_ms >= ? AND start_ms < ?) OR (start_ms = 0 AND "+countMs+" >= ? AND "+countMs+" < ?))",
			pt[0], pt[1], pt[0], pt[1])
		if err := s.usageUnits(ctx, pw, u); err != nil {
			return nil, err
		}
	}
	return u.result(), nil
}

// usageDays adds the usage_daily rows w selects.
func (s *Store) usageDays(ctx context.Context, w where, u *usageSum) error {
	rows, err := s.db.QueryContext(ctx, s.q("SELECT usr, day, project, cluster, kind, "+rollupColumns+
		", energy, emissions FROM usage_daily"+w.String()), w.args...)
	if err != nil {
		return fmt.Errorf("store: usage: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var c contribution
		var energy, emissions string
		dst := []any{&c.key.user, &c.key.day, &c.key.project, &c.key.cluster, &c.key.kind}
		for i := range c.sums {
			dst = append(dst, &c.sums[i])
		}
		dst = append(dst, &energy, &emissions)
		if err := rows.Scan(dst...); err != nil {
			return fmt.Errorf("store: usage: %w", err)
		}
		if c.energy, err = decodeEnergy(energy); err != nil {
			return fmt.Errorf("store: usage energy: %w", err)
		}
		if c.grams, err = decodeEmissions(emissions); err != nil {
			return fmt.Errorf("store: usage emissions: %w", err)
		}
		u.add(&c)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("store: usage: %w", err)
	}
	return nil
}

// usageUnits adds the contributions of the units w selects, as the
// rollup holds them.
func (s *Store) usageUnits(ctx context.Context, w where, u *usageSum) error {
	rows, err := s.db.QueryContext(ctx, s.q("SELECT "+unitColumns+" FROM units"+w.String()), w.args...)
	if err != nil {
		return fmt.Errorf("store: usage: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return fmt.Errorf("store: usage: %w", err)
		}
		c := r.contribution()
		u.add(&c)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("store: usage: %w", err)
	}
	return nil
}

type usageBucketKey struct {
	from                         int64
	cluster, kind, user, project string
}

type usageBucket struct {
	c  contribution
	to time.Time
}

// usageSum accumulates contributions into a usage query's buckets.
type usageSum struct {
	q       units.UsageQuery
	by      map[units.GroupBy]bool
	buckets map[usageBucketKey]*usageBucket
}

func newUsageSum(q units.UsageQuery) *usageSum {
	u := &usageSum{q: q, by: map[units.GroupBy]bool{}, buckets: map[usageBucketKey]*usageBucket{}}
	for _, b := range q.By {
		u.by[b] = true
	}
	return u
}

// add puts one day's contribution into its bucket. A day or month bucket
// is reported as the part of it the query covers: the range summed.
func (u *usageSum) add(c *contribution) {
	dayStart := time.UnixMilli(c.key.day * msPerDay).UTC()
	from, to := u.q.From.UTC(), u.q.To.UTC()
	switch u.q.Period {
	case units.PeriodDay:
		from, to = dayStart, dayStart.AddDate(0, 0, 1)
	case units.PeriodMonth:
		from = time.Date(dayStart.Year(), dayStart.Month(), 1, 0, 0, 0, 0, time.UTC)
		to = from.AddDate(0, 1, 0)
	}
	if from.Before(u.q.From) {
		from = u.q.From.UTC()
	}
	if to.After(u.q.To) {
		to = u.q.To.UTC()
	}
	bk := usageBucketKey{from: from.UnixMilli()}
	if u.by[units.ByCluster] {
		bk.cluster = c.key.cluster
	}
	if u.by[units.ByKind] {
		bk.kind = c.key.kind
	}
	if u.by[units.ByUser] {
		bk.user = c.key.user
	}
	if u.by[units.ByProject] {
		bk.project = c.key.project
	}
	b := u.buckets[bk]
	if b == nil {
		b = &usageBucket{c: contribution{energy: map[zoneMethod]float64{}, grams: map[zoneProvider]float64{}}, to: to}
		u.buckets[bk] = b
	}
	for i, v := range c.sums {
		b.c.sums[i] += v
	}
	for z, v := range c.energy {
		b.c.energy[z] += v
	}
	for z, v := range c.grams {
		b.c.grams[z] += v
	}
}

func (u *usageSum) result() []units.Usage {
	out := make([]units.Usage, 0, len(u.buckets))
	for k, b := range u.buckets {
		s := b.c.sums
		out = append(out, units.Usage{
			Cluster: k.cluster, Kind: units.Kind(k.kind), User: k.user, Project: k.project,
			From: time.UnixMilli(k.from).UTC(), To: b.to,
			Units: int64(s[sUnits] + 0.5), WallSeconds: s[sWall],
			Figures: units.Figures{
				Energy: energyList(b.c.energy), Emissions: emissionList(b.c.grams),
				CPUSeconds: s[sCPU], GPUSeconds: s[sGPU], GPUIdleSeconds: s[sGPUIdle],
				IOReadBytes: s[sIORead], IOWriteBytes: s[sIOWrite],
				NetSentBytes: s[sNetSent], NetReceivedBytes: s[sNetRecv],
			},
			Averages: averages(s),
		})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if !a.From.Equal(b.From) {
			return a.From.Before(b.From)
		}
		if a.Cluster != b.Cluster {
			return a.Cluster < b.Cluster
		}
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.User != b.User {
			return a.User < b.User
		}
		return a.Project < b.Project
	})
	return out
}

// members returns (cluster, user, project) triples the membership selects.
func (s *Store) members(ctx context.Context, m units.Membership, order string) ([][3]string, error) {
	if err := checkLists(m.Clusters, m.Users, m.Projects); err != nil {
		return nil, err
	}
	var w where
	w.in("cluster", m.Clusters)
	w.in("usr", m.Users)
	w.in("project", m.Projects)
	rows, err := s.db.QueryContext(ctx, s.q("SELECT cluster, usr, project FROM members"+w.String()+" ORDER BY "+order), w.args...)
	if err != nil {
		return nil, fmt.Errorf("store: members: %w", err)
	}
	defer rows.Close()
	var out [][3]string
	for rows.Next() {
		var t [3]string
		if err := rows.Scan(&t[0], &t[1], &t[2]); err != nil {
			return nil, fmt.Errorf("store: members: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// Projects lists projects with their users.
func (s *Store) Projects(ctx context.Context, m units.Membership) ([]units.Project, error) {
	ts, err := s.members(ctx, m, "cluster, project, usr")
	if err != nil {
		return nil, err
	}
	out := []units.Project{}
	for _, t := range ts {
		if t[2] == "" {
			continue
		}
		n := len(out)
		if n == 0 || out[n-1].Cluster != t[0] || out[n-1].Name != t[2] {
			out = append(out, units.Project{Cluster: t[0], Name: t[2], Users: []string{}})
			n++
		}
		if t[1] != "" {
			out[n-1].Users = append(out[n-1].Users, t[1])
		}
	}
	return out, nil
}

// Users lists users with their projects.
func (s *Store) Users(ctx context.Context, m units.Membership) ([]units.User, error) {
	ts, err := s.members(ctx, m, "cluster, usr, project")
	if err != nil {
		return nil, err
	}
	out := []units.User{}
	for _, t := range ts {
		if t[1] == "" {
			continue
		}
		n := len(out)
		if n == 0 || out[n-1].Cluster != t[0] || out[n-1].Name != t[1] {
			out = append(out, units.User{Cluster: t[0], Name: t[1], Projects: []string{}})
			n++
		}
		if t[2] != "" {
			out[n-1].Projects = append(out[n-1].Projects, t[2])
		}
	}
	return out, nil
}
