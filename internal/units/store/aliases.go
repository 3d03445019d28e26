package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/wattrace/wattrace/pkg/units"
)

// Aliases maps aliases (Slurm SLUIDs) of units of one kind on one cluster
// to the units' ids; aliases the store does not know are left out.
func (s *Store) Aliases(ctx context.Context, cluster string, kind units.Kind, aliases []string) (map[string]string, error) {
	out := map[string]string{}
	if len(aliases) == 0 {
		return out, nil
	}
	stmt, err := s.db.PrepareContext(ctx, s.q("SELECT unit_id FROM unit_aliases WHERE cluster = ? AND kind = ? AND alias = ?"))
	if err != nil {
		return nil, fmt.Errorf("store: aliases: %w", err)
	}
	defer stmt.Close()
	for _, a := range aliases {
		var id string
		err := stmt.QueryRowContext(ctx, cluster, string(kind), a).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("store: alias %s: %w", a, err)
		}
		out[a] = id
	}
	return out, nil
}

// aliasOf returns the unit id an alias names, "" when none.
func (w *writer) aliasOf(cluster string, kind units.Kind, alias string) (string, error) {
	var id string
	err := w.tx.QueryRowContext(w.ctx, w.s.q("SELECT unit_id FROM unit_aliases WHERE cluster = ? AND kind = ? AND alias = ?"),
		cluster, string(kind), alias).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return id, err
}

// seriesOf reads a unit's kept series state (nil when none).
func (w *writer) seriesOf(ref int64) (map[string]SeriesState, error) {
	var state string
	err := w.tx.QueryRowContext(w.ctx, w.s.q("SELECT state FROM unit_series WHERE ref = ?"), ref).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return decodeSeries(state)
}

// unionSeries adds b's series to a, keeping the newer sample of a series
// both hold.
func unionSeries(a, b map[string]SeriesState) map[string]SeriesState {
	out := make(map[string]SeriesState, len(a)+len(b))
	for id, s := range a {
		out[id] = s
	}
	for id, s := range b {
		if cur, ok := out[id]; !ok || s.T > cur.T {
			out[id] = s
		}
	}
	return out
}

func (w *writer) putSeries(r *row, series map[string]SeriesState) error {
	b, err := json.Marshal(series)
	if err != nil {
		return err
	}
	_, err = w.series.ExecContext(w.ctx, r.ref, r.last, string(b))
	return err
}

// statusRank orders statuses for a merge: a unit running under either id
// is running.
func statusRank(s string) int {
	switch units.Status(s) {
	case units.StatusRunning:
		return 2
	case units.StatusPending:
		return 1
	}
	return 0
}

// alias records that u.SLUID names the job u (Slurm 26.05 reports both),
// and folds a unit the updater counted under the SLUID alone (series whose
// job_id the exporter did not know) into r, u's row: figures, nodes,
// times and series state, so that those series go on from their kept
// samples under the job's id, counted once. A SLUID already naming
// another job is refused: Slurm never gives one twice, so one of the two
// records is wrong, and neither is believed.
func (w *writer) alias(u *units.Unit, r *row) error {
	if u.Kind != units.KindJob || !units.ValidSLUID(u.SLUID) {
		return fmt.Errorf("%w: sluid %.40q of a %s", units.ErrInvalid, u.SLUID, u.Kind)
	}
	cur, err := w.aliasOf(u.Cluster, u.Kind, u.SLUID)
	if err != nil {
		return err
	}
	switch {
	case cur == u.ID:
	case cur != "":
		return fmt.Errorf("%w: sluid %s names job %s and job %s", units.ErrInvalid, u.SLUID, cur, u.ID)
	default:
		if _, err := w.tx.ExecContext(w.ctx, w.s.q("INSERT INTO unit_aliases (cluster, kind, alias, unit_id) VALUES (?, ?, ?, ?)"),
			u.Cluster, string(u.Kind), u.SLUID, u.ID); err != nil {
			return fmt.Errorf("alias: %w", err)
		}
	}
	sr, err := w.load(units.Key{Cluster: u.Cluster, Kind: u.Kind, ID: u.SLUID})
	if err != nil || sr == nil {
		return err
	}
	return w.fold(sr, r)
}

// fold moves the unit sr into r and deletes it.
func (w *writer) fold(sr, r *row) error {
	c := r.contribution()
	old := &c
	sc := sr.contribution()
	w.add(&sc, -1)
	r.addFigures(sr.figures())
	if sr.nodes != "" {
		r.nodes = mergeNodes(r.nodes, strings.Split(sr.nodes, ","))
	}
	if sr.first != 0 && (r.first == 0 || sr.first < r.first) {
		r.first = sr.first
	}
	r.last = max(r.last, sr.last)
	if statusRank(sr.status) > statusRank(r.status) {
		r.status = sr.status
	}
	a, err := w.seriesOf(r.ref)
	if err != nil {
		return err
	}
	b, err := w.seriesOf(sr.ref)
	if err != nil {
		return err
	}
	for _, q := range []string{"DELETE FROM unit_series WHERE ref = ?", "DELETE FROM units WHERE ref = ?"} {
		if _, err := w.tx.ExecContext(w.ctx, w.s.q(q), sr.ref); err != nil {
			return fmt.Errorf("fold %s into %s: %w", sr.id, r.id, err)
		}
	}
	if err := w.save(r, old); err != nil {
		return err
	}
	if a != nil || b != nil {
		return w.putSeries(r, unionSeries(a, b))
	}
	return nil
}

// redirect turns an observation of a job under its SLUID into one of the
// job's id once the store knows the alias (the updater read its window
// before the alias arrived): the observation's series are merged with
// the job's, newest sample first, so nothing is counted twice.
func (w *writer) redirect(o *Observation) error {
	if o.Key.Kind != units.KindJob || !units.ValidSLUID(o.Key.ID) {
		if w.touched[o.Key] {
			return w.unionKept(o)
		}
		return nil
	}
	id, err := w.aliasOf(o.Key.Cluster, o.Key.Kind, o.Key.ID)
	if err != nil || id == "" {
		return err
	}
	o.Key.ID = id
	return w.unionKept(o)
}

// unionKept merges an observation's series with those the unit holds
// already: after a redirect, or when another observation of this
// transaction (one redirected to the same unit) wrote them.
func (w *writer) unionKept(o *Observation) error {
	if o.Series == nil {
		return nil
	}
	r, err := w.load(o.Key)
	if err != nil || r == nil {
		return err
	}
	cur, err := w.seriesOf(r.ref)
	if err != nil {
		return err
	}
	o.Series = unionSeries(cur, o.Series)
	return nil
}
