package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/wattrace/wattrace/pkg/units"
)

// SeriesState is the last sample of one TSDB series counted into a unit.
type SeriesState struct {
	V float64 `json:"v"` // value
	T int64   `json:"t"` // Unix milliseconds
	// I is the series' identity (the updater's fingerprint of the labels
	// that name the counter), so a series whose descriptive labels were
	// filled in later continues from this sample; empty in state written
	// before it was kept.
	I string `json:"i,omitempty"`
}

// Tracked is what the updater needs of a unit it follows.
type Tracked struct {
	units.Key
	Status units.Status
	// Series is the last sample counted of each of the unit's series, by
	// the updater's series key; nil for a unit no series was counted into
	// (or whose state was pruned).
	Series map[string]SeriesState
}

// Observation is what one update cycle learned about a unit from the TSDB.
type Observation struct {
	Key units.Key
	// Name, User and Project come from the series' labels; they fill a
	// unit no manager connector described and never overwrite one.
	Name, User, Project string
	Nodes               []string
	// First and Last are the times of the first and last samples counted
	// this cycle (zero if none).
	First, Last time.Time
	// Delta is the increase counted this cycle; added to the figures.
	Delta units.Figures
	// Series replaces the unit's series state when not nil.
	Series map[string]SeriesState
	// Status is the unit's status after this cycle.
	Status units.Status
}

// Meta states for units only the TSDB describes.
const (
	StateRunning = "RUNNING"
	StateEnded   = "ENDED"
)

// metaSlurm marks a unit Slurm described; the TSDB then fills only figures.
const metaSlurm = "slurm"

// Cursor returns where a feeder stopped (false when it never ran).
func (s *Store) Cursor(ctx context.Context, name string) (time.Time, bool, error) {
	var ms int64
	err := s.db.QueryRowContext(ctx, s.q("SELECT ms FROM cursors WHERE name = ?"), name).Scan(&ms)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("store: cursor %s: %w", name, err)
	}
	return time.UnixMilli(ms).UTC(), true, nil
}

func (s *Store) setCursor(ctx context.Context, tx *sql.Tx, name string, at time.Time) error {
	_, err := tx.ExecContext(ctx, s.q(`INSERT INTO cursors (name, ms) VALUES (?, ?)
		ON CONFLICT (name) DO UPDATE SET ms = excluded.ms`), name, at.UnixMilli())
	return err
}

// Open returns the units whose figures may still change (status not final)
// with their series state.
func (s *Store) Open(ctx context.Context) ([]Tracked, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT u.cluster, u.kind, u.unit_id, u.status, COALESCE(s.state, '')
		FROM units u LEFT JOIN unit_series s ON s.ref = u.ref WHERE u.status <> 'final'`)
	if err != nil {
		return nil, fmt.Errorf("store: open units: %w", err)
	}
	defer rows.Close()
	var out []Tracked
	for rows.Next() {
		var t Tracked
		var state string
		if err := rows.Scan(&t.Cluster, &t.Kind, &t.ID, &t.Status, &state); err != nil {
			return nil, fmt.Errorf("store: open units: %w", err)
		}
		if t.Series, err = decodeSeries(state); err != nil {
			return nil, fmt.Errorf("store: series of %v: %w", t.Key, err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// Lookup returns the units among keys that the store knows (final ones
// included), with their series state where it is kept.
func (s *Store) Lookup(ctx context.Context, keys []units.Key) ([]Tracked, error) {
	var out []Tracked
	stmt, err := s.db.PrepareContext(ctx, s.q(`SELECT u.status, COALESCE(s.state, '')
		FROM units u LEFT JOIN unit_series s ON s.ref = u.ref WHERE u.cluster = ? AND u.kind = ? AND u.unit_id = ?`))
	if err != nil {
		return nil, fmt.Errorf("store: lookup: %w", err)
	}
	defer stmt.Close()
	for _, k := range keys {
		t := Tracked{Key: k}
		var state string
		err := stmt.QueryRowContext(ctx, k.Cluster, string(k.Kind), k.ID).Scan(&t.Status, &state)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("store: lookup %v: %w", k, err)
		}
		if t.Series, err = decodeSeries(state); err != nil {
			return nil, fmt.Errorf("store: series of %v: %w", k, err)
		}
		out = append(out, t)
	}
	return out, nil
}

func decodeSeries(s string) (map[string]SeriesState, error) {
	if s == "" {
		return nil, nil
	}
	m := map[string]SeriesState{}
	return m, json.Unmarshal([]byte(s), &m)
}

// MarkPending sets every running unit pending: the TSDB could not be read,
// so their figures are not known to be current. Figures are untouched.
func (s *Store) MarkPending(ctx context.Context) (int64, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE units SET status = ?, updated_ms = ? WHERE status = ?`),
		string(units.StatusPending), s.now().UnixMilli(), string(units.StatusRunning))
	if err != nil {
		return 0, fmt.Errorf("store: mark pending: %w", err)
	}
	return res.RowsAffected()
}

// ApplyCycle records one update cycle in one transaction: every
// observation, the rollup and the cursor move together, so a crash
// leaves the store at the previous cycle and nothing is counted twice.
func (s *Store) ApplyCycle(ctx context.Context, cursor string, at time.Time, obs []Observation) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	now := s.now().UnixMilli()
	err := s.tx(ctx, func(tx *sql.Tx) error {
		w, err := s.newWriter(ctx, tx)
		if err != nil {
			return err
		}
		defer w.close()
		for i := range obs {
			if err := w.observe(&obs[i], now); err != nil {
				return fmt.Errorf("unit %v: %w", obs[i].Key, err)
			}
		}
		if err := w.flushRollup(); err != nil {
			return err
		}
		return s.setCursor(ctx, tx, cursor, at)
	})
	if err != nil {
		return fmt.Errorf("store: apply cycle at %s: %w", at.UTC().Format(time.RFC3339), err)
	}
	return nil
}

// UpsertJobs records what a manager connector (Slurm) says about units:
// everything but the figures and status, which stay the TSDB's. The
// cursor moves in the same transaction.
func (s *Store) UpsertJobs(ctx context.Context, cursor string, at time.Time, jobs []units.Unit) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	now := s.now().UnixMilli()
	err := s.tx(ctx, func(tx *sql.Tx) error {
		w, err := s.newWriter(ctx, tx)
		if err != nil {
			return err
		}
		defer w.close()
		for i := range jobs {
			if err := w.describe(&jobs[i], now); err != nil {
				return fmt.Errorf("unit %v: %w", jobs[i].Key(), err)
			}
		}
		if err := w.flushRollup(); err != nil {
			return err
		}
		if cursor == "" {
			return nil
		}
		return s.setCursor(ctx, tx, cursor, at)
	})
	if err != nil {
		return fmt.Errorf("store: upsert %d jobs: %w", len(jobs), err)
	}
	return nil
}

// writer holds one transaction's prepared statements and the rollup
// changes it accumulates (applied once per rollup row at the end).
type writer struct {
	s                                           *Store
	ctx                                         context.Context
	tx                                          *sql.Tx
	get, insert, update, series, member         *sql.Stmt
	rollGet, rollInsert, rollUpdate, rollDelete *sql.Stmt
	rollup                                      map[rollupKey]*contribution
	// touched are the units an observation of this transaction wrote.
	touched map[units.Key]bool
}

func (s *Store) newWriter(ctx context.Context, tx *sql.Tx) (*writer, error) {
	w := &writer{s: s, ctx: ctx, tx: tx, rollup: map[rollupKey]*contribution{}, touched: map[units.Key]bool{}}
	cols := strings.Split(strings.ReplaceAll(unitColumns, "\n", ""), ",")[1:]
	for i := range cols {
		cols[i] = strings.TrimSpace(cols[i])
	}
	sets := make([]string, len(cols))
	for i, c := range cols {
		sets[i] = c + " = ?"
	}
	rcols := strings.Split(rollupColumns, ", ")
	rsets := make([]string, len(rcols))
	for i, c := range rcols {
		rsets[i] = c + " = ?"
	}
	stmts := []struct {
		dst   **sql.Stmt
		query string
	}{
		{&w.get, "SELECT " + unitColumns + " FROM units WHERE cluster = ? AND kind = ? AND unit_id = ?"},
		{&w.insert, "INSERT INTO units (" + strings.Join(cols, ", ") + ") VALUES (" + placeholders(len(cols)) + ") RETURNING ref"},
		{&w.update, "UPDATE units SET " + strings.Join(sets, ", ") + " WHERE ref = ?"},
		{&w.series, `INSERT INTO unit_series (ref, last_ms, state) VALUES (?, ?, ?)
			ON CONFLICT (ref) DO UPDATE SET last_ms = excluded.last_ms, state = excluded.state`},
		{&w.member, "INSERT INTO members (cluster, usr, project) VALUES (?, ?, ?) ON CONFLICT DO NOTHING"},
		{&w.rollGet, "SELECT " + rollupColumns + ", energy, emissions FROM usage_daily WHERE usr = ? AND day = ? AND project = ? AND cluster = ? AND kind = ?"},
		{&w.rollInsert, "INSERT INTO usage_daily (usr, day, project, cluster, kind, " + rollupColumns + ", energy, emissions) VALUES (" + placeholders(5+rollupSums+2) + ")"},
		{&w.rollDelete, "DELETE FROM usage_daily WHERE usr = ? AND day = ? AND project = ? AND cluster = ? AND kind = ?"},
		{&w.rollUpdate, "UPDATE usage_daily SET " + strings.Join(rsets, ", ") + ", energy = ?, emissions = ? WHERE usr = ? AND day = ? AND project = ? AND cluster = ? AND kind = ?"},
	}
	for _, st := range stmts {
		p, err := tx.PrepareContext(ctx, s.q(st.query))
		if err != nil {
			w.close()
			return nil, fmt.Errorf("prepare %q: %w", st.query, err)
		}
		*st.dst = p
	}
	return w, nil
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

func (w *writer) close() {
	for _, st := range []*sql.Stmt{w.get, w.insert, w.update, w.series, w.member, w.rollGet, w.rollInsert, w.rollUpdate, w.rollDelete} {
		if st != nil {
			st.Close()
		}
	}
}

// load reads a unit's row, or nil when the store does not know it.
func (w *writer) load(k units.Key) (*row, error) {
	r, err := scanRow(w.get.QueryRowContext(w.ctx, k.Cluster, string(k.Kind), k.ID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return r, err
}

// save writes the row (inserting it when new) and moves its contribution
// in the rollup from old (nil for a new unit) to its current one.
func (w *writer) save(r *row, old *contribution) error {
	if r.ref == 0 {
		if err := w.insert.QueryRowContext(w.ctx, r.args()...).Scan(&r.ref); err != nil {
			return fmt.Errorf("insert: %w", err)
		}
	} else if _, err := w.update.ExecContext(w.ctx, append(r.args(), r.ref)...); err != nil {
		return fmt.Errorf("update: %w", err)
	}
	if old != nil {
		w.add(old, -1)
	}
	c := r.contribution()
	w.add(&c, 1)
	if r.user != "" || r.project != "" {
		if _, err := w.member.ExecContext(w.ctx, r.cluster, r.user, r.project); err != nil {
			return fmt.Errorf("members: %w", err)
		}
	}
	return nil
}

func (w *writer) add(c *contribution, sign float64) {
	acc := w.rollup[c.key]
	if acc == nil {
		acc = &contribution{key: c.key, energy: map[zoneMethod]float64{}, grams: map[zoneProvider]float64{}}
		w.rollup[c.key] = acc
	}
	for i, v := range c.sums {
		acc.sums[i] += sign * v
	}
	for k, v := range c.energy {
		acc.energy[k] += sign * v
	}
	for k, v := range c.grams {
		acc.grams[k] += sign * v
	}
}

// flushRollup adds the accumulated changes to usage_daily, one read and
// one write per row touched, in a fixed order (no deadlocks on PostgreSQL).
func (w *writer) flushRollup() error {
	keys := make([]rollupKey, 0, len(w.rollup))
	for k := range w.rollup {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.user != b.user {
			return a.user < b.user
		}
		if a.day != b.day {
			return a.day < b.day
		}
		if a.project != b.project {
			return a.project < b.project
		}
		if a.cluster != b.cluster {
			return a.cluster < b.cluster
		}
		return a.kind < b.kind
	})
	for _, k := range keys {
		d := w.rollup[k]
		kargs := []any{k.user, k.day, k.project, k.cluster, k.kind}
		var cur [rollupSums]float64
		var energy, emissions string
		dst := make([]any, 0, rollupSums+2)
		for i := range cur {
			dst = append(dst, &cur[i])
		}
		dst = append(dst, &energy, &emissions)
		err := w.rollGet.QueryRowContext(w.ctx, kargs...).Scan(dst...)
		exists := err == nil
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("usage_daily: %w", err)
		}
		em, err := decodeEnergy(energy)
		if err != nil {
			return fmt.Errorf("usage_daily energy: %w", err)
		}
		gm, err := decodeEmissions(emissions)
		if err != nil {
			return fmt.Errorf("usage_daily emissions: %w", err)
		}
		if em == nil {
			em = map[zoneMethod]float64{}
		}
		if gm == nil {
			gm = map[zoneProvider]float64{}
		}
		vals := make([]any, 0, rollupSums+2)
		for i := range cur {
			vals = append(vals, clean(cur[i]+d.sums[i]))
		}
		for z, v := range d.energy {
			if em[z] = clean(em[z] + v); em[z] == 0 {
				delete(em, z)
			}
		}
		for z, v := range d.grams {
			if gm[z] = clean(gm[z] + v); gm[z] == 0 {
				delete(gm, z)
			}
		}
		vals = append(vals, encodeEnergy(em), encodeEmissions(gm))
		if emptyRollup(vals) {
			// Every unit moved away (to another project or day): no
			// row of zeros is left behind for Usage to report.
			if exists {
				_, err = w.rollDelete.ExecContext(w.ctx, kargs...)
			}
		} else if exists {
			_, err = w.rollUpdate.ExecContext(w.ctx, append(vals, kargs...)...)
		} else {
			_, err = w.rollInsert.ExecContext(w.ctx, append(kargs, vals...)...)
		}
		if err != nil {
			return fmt.Errorf("usage_daily: %w", err)
		}
	}
	return nil
}

// emptyRollup reports whether a usage_daily row's values are all zero.
func emptyRollup(vals []any) bool {
	for _, v := range vals {
		switch v := v.(type) {
		case float64:
			if v != 0 {
				return false
			}
		case string:
			if v != "" {
				return false
			}
		}
	}
	return true
}

// observe applies one Observation.
func (w *writer) observe(o *Observation, now int64) error {
	if err := w.redirect(o); err != nil {
		return err
	}
	w.touched[o.Key] = true
	r, err := w.load(o.Key)
	if err != nil {
		return err
	}
	var old *contribution
	if r == nil {
		r = &row{cluster: o.Key.Cluster, kind: string(o.Key.Kind), id: o.Key.ID}
	} else {
		c := r.contribution()
		old = &c
	}
	r.addFigures(o.Delta)
	r.nodes = mergeNodes(r.nodes, o.Nodes)
	if f := timeMs(o.First); f != 0 && (r.first == 0 || f < r.first) {
		r.first = f
	}
	if l := timeMs(o.Last); l > r.last {
		r.last = l
	}
	r.status = string(o.Status)
	r.updated = now
	if r.meta == "" {
		// Only the TSDB describes this unit: it says what it can.
		if r.name == "" {
			r.name = o.Name
		}
		if r.user == "" {
			r.user = o.User
		}
		if r.project == "" {
			r.project = o.Project
		}
		r.start = r.first
		r.state = StateRunning
		r.end = 0
		if o.Status == units.StatusFinal {
			r.state = StateEnded
			r.end = r.last
		}
	}
	if err := w.save(r, old); err != nil {
		return err
	}
	if o.Series != nil {
		b, err := json.Marshal(o.Series)
		if err != nil {
			return err
		}
		if _, err := w.series.ExecContext(w.ctx, r.ref, r.last, string(b)); err != nil {
			return fmt.Errorf("series: %w", err)
		}
	}
	return nil
}

// describe applies what a connector says about one unit.
func (w *writer) describe(u *units.Unit, now int64) error {
	if u.Cluster == "" || u.ID == "" || !u.Kind.Valid() {
		return fmt.Errorf("%w: a described unit needs a cluster, a kind and an id", units.ErrInvalid)
	}
	r, err := w.load(u.Key())
	if err != nil {
		return err
	}
	var old *contribution
	if r == nil {
		// Known to the manager, not yet seen in the TSDB: no figures,
		// so pending, never final with zeros.
		r = &row{cluster: u.Cluster, kind: string(u.Kind), id: u.ID, status: string(units.StatusPending)}
	} else {
		c := r.contribution()
		old = &c
	}
	r.meta = metaSlurm
	r.name, r.user, r.group, r.project, r.partition = u.Name, u.User, u.Group, u.Project, u.Partition
	if len(u.Nodes) > 0 {
		r.nodes = strings.Join(u.Nodes, ",")
	}
	r.state = u.State
	r.submit, r.start, r.end = timeMs(u.Submit), timeMs(u.Start), timeMs(u.End)
	r.allocCPUs, r.allocMem, r.allocGPUs = int64(u.Allocation.CPUs), u.Allocation.MemoryBytes, int64(u.Allocation.GPUs)
	r.exit = sql.NullInt64{}
	if u.ExitCode != nil {
		r.exit = sql.NullInt64{Int64: int64(*u.ExitCode), Valid: true}
	}
	r.updated = now
	if err := w.save(r, old); err != nil {
		return err
	}
	if u.SLUID != "" {
		return w.alias(u, r)
	}
	return nil
}

// mergeNodes adds nodes to a comma-separated list, keeping it sorted and
// unique.
func mergeNodes(list string, nodes []string) string {
	if len(nodes) == 0 {
		return list
	}
	set := map[string]bool{}
	if list != "" {
		for _, n := range strings.Split(list, ",") {
			set[n] = true
		}
	}
	for _, n := range nodes {
		if n != "" {
			set[strings.ReplaceAll(n, ",", "_")] = true
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// PruneSeries forgets the series state of final units whose last sample is
// older than cutoff: after it, a series that comes back counts afresh.
func (s *Store) PruneSeries(ctx context.Context, cutoff time.Time) (int64, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	res, err := s.db.ExecContext(ctx, s.q(`DELETE FROM unit_series WHERE last_ms < ? AND ref IN
		(SELECT ref FROM units WHERE status = 'final')`), cutoff.UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("store: prune series: %w", err)
	}
	return res.RowsAffected()
}
