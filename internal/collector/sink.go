package collector

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// desc is one family: the registry's descriptor and what the text writer
// needs of it, which prometheus.Desc does not expose.
type desc struct {
	prom   *prometheus.Desc
	name   string
	help   string
	labels []string
	// order lists the label indices in the order of their names: the
	// registry sorts a metric's labels by name, and so its families'
	// samples by their values in that order.
	order []int
}

// newDesc builds the descriptor of the family wattrace_<sub>_<name>.
func newDesc(sub, name, help string, labels ...string) *desc {
	fq := prometheus.BuildFQName(namespace, sub, name)
	d := &desc{prom: prometheus.NewDesc(fq, help, labels, nil), name: fq, help: help, labels: labels}
	d.order = make([]int, len(labels))
	for i := range d.order {
		d.order[i] = i
	}
	slices.SortStableFunc(d.order, func(a, b int) int { return strings.Compare(labels[a], labels[b]) })
	return d
}

// describeAll sends descriptors; collectors' describe methods list theirs.
func describeAll(ch chan<- *prometheus.Desc, ds ...*desc) {
	for _, d := range ds {
		ch <- d.prom
	}
}

// sink takes the collectors' samples. For the registry (Collect) it sends
// const metrics down a channel; for AppendText it keeps them by family and
// writes the text format itself. The text path exists for cost: a const
// metric is a protobuf message with a label pair per label, which the
// registry then checks, sorts and the encoder walks again; at 200 jobs
// that was a third of the exporter's CPU and most of its garbage. Its
// output is the registry's byte for byte (TestAppendTextIsGather).
type sink struct {
	ch   chan<- prometheus.Metric
	text *textFamilies
}

// add sends one sample whose label values are labels.
func (s *sink) add(d *desc, t prometheus.ValueType, v float64, labels ...string) {
	s.addWith(d, t, v, labels)
}

// addWith sends one sample whose label values are base followed by
// extra, without joining them: most families are a workload's labels and
// one or two of their own, and the join was an allocation per sample.
func (s *sink) addWith(d *desc, t prometheus.ValueType, v float64, base []string, extra ...string) {
	if s.text != nil {
		s.text.add(d, t, v, base, extra)
		return
	}
	// metric sanitizes in place: the copy keeps a snapshot's shared label
	// slices untouched.
	ls := make([]string, 0, len(base)+len(extra))
	ls = append(append(ls, base...), extra...)
	s.ch <- metric(d.prom, t, v, ls...)
}

// textFamilies are one rendering's samples by family. An exporter keeps
// one and resets it for the next rendering (reset), so the families'
// slices are allocated once at about their size, not at every scrape.
type textFamilies struct {
	byDesc map[*desc]*textFamily
	byName map[string]*textFamily
	errs   []error
}

// textFamily is one family's samples: each row's label values, in the
// order of their names, are vals[row.at:row.at+len(labels)].
type textFamily struct {
	d    *desc
	typ  prometheus.ValueType
	vals []string
	rows []textRow
}

type textRow struct {
	at int
	v  float64
}

func newTextFamilies() *textFamilies {
	return &textFamilies{byDesc: map[*desc]*textFamily{}, byName: map[string]*textFamily{}}
}

// reset empties every family for the next rendering, dropping the label
// values so that the old snapshot's strings are not kept alive.
func (t *textFamilies) reset() {
	for _, f := range t.byName {
		clear(f.vals)
		f.vals, f.rows = f.vals[:0], f.rows[:0]
	}
	t.errs = nil
}

func (t *textFamilies) add(d *desc, typ prometheus.ValueType, v float64, base, extra []string) {
	if n := len(base) + len(extra); n != len(d.labels) {
		t.errs = append(t.errs, fmt.Errorf("%s: %d label values for %d labels", d.name, n, len(d.labels)))
		return
	}
	f := t.byDesc[d]
	if f == nil {
		// Two descriptors of one name are one family, as the registry
		// merges them.
		if f = t.byName[d.name]; f == nil {
			f = &textFamily{d: d, typ: typ}
			t.byName[d.name] = f
		}
		t.byDesc[d] = f
	}
	if typ != f.typ {
		t.errs = append(t.errs, fmt.Errorf("%s: a %s sample in a %s family", d.name, typeName(typ), typeName(f.typ)))
		return
	}
	at := len(f.vals)
	for _, i := range d.order {
		var l string
		if i < len(base) {
			l = base[i]
		} else {
			l = extra[i-len(base)]
		}
		f.vals = append(f.vals, strings.ToValidUTF8(l, "\uFFFD"))
	}
	f.rows = append(f.rows, textRow{at: at, v: v})
}

// TextFamily is one family's place in a text rendering: its name and its
// bytes, buf[Start:End] of the buffer AppendText returned.
type TextFamily struct {
	Name       string
	Start, End int
}

// appendTo writes every family in the text format, sorted by name and
// each family's samples by their label values, as the registry's Gather
// and expfmt's encoder do. A sample whose labels repeat an earlier one's
// is dropped with an error, as Gather drops it.
func (t *textFamilies) appendTo(buf []byte) ([]byte, []TextFamily) {
	fams := make([]*textFamily, 0, len(t.byName))
	for _, f := range t.byName {
		if len(f.rows) > 0 {
			fams = append(fams, f)
		}
	}
	slices.SortFunc(fams, func(a, b *textFamily) int { return strings.Compare(a.d.name, b.d.name) })
	spans := make([]TextFamily, 0, len(fams))
	for _, f := range fams {
		start := len(buf)
		buf = f.appendTo(buf, &t.errs)
		spans = append(spans, TextFamily{Name: f.d.name, Start: start, End: len(buf)})
	}
	return buf, spans
}

func (f *textFamily) appendTo(buf []byte, errs *[]error) []byte {
	n := len(f.d.labels)
	key := func(r textRow) []string { return f.vals[r.at : r.at+n] }
	// Stable, so of two samples with the same labels the first sent is
	// kept, as Gather keeps it.
	slices.SortStableFunc(f.rows, func(a, b textRow) int { return slices.Compare(key(a), key(b)) })
	buf = append(buf, "# HELP "...)
	buf = append(buf, f.d.name...)
	buf = append(buf, ' ')
	buf = appendEscaped(buf, f.d.help, false)
	buf = append(buf, "\n# TYPE "...)
	buf = append(buf, f.d.name...)
	buf = append(buf, ' ')
	buf = append(buf, typeName(f.typ)...)
	buf = append(buf, '\n')
	for i, r := range f.rows {
		k := key(r)
		if i > 0 && slices.Equal(k, key(f.rows[i-1])) {
			*errs = append(*errs, fmt.Errorf("%s%v: collected twice with the same label values", f.d.name, k))
			continue
		}
		buf = append(buf, f.d.name...)
		if n > 0 {
			sep := byte('{')
			for j, li := range f.d.order {
				buf = append(buf, sep)
				buf = append(buf, f.d.labels[li]...)
				buf = append(buf, '=', '"')
				buf = appendEscaped(buf, k[j], true)
				buf = append(buf, '"')
				sep = ','
			}
			buf = append(buf, '}')
		}
		buf = append(buf, ' ')
		buf = appendFloat(buf, r.v)
		buf = append(buf, '\n')
	}
	return buf
}

// typeName is the text format's name of a value type.
func typeName(t prometheus.ValueType) string {
	switch t {
	case prometheus.CounterValue:
		return "counter"
	case prometheus.GaugeValue:
		return "gauge"
	default:
		return "untyped"
	}
}

// appendEscaped escapes as the text format does: backslash and newline,
// and the double quote inside a label value.
func appendEscaped(buf []byte, s string, quote bool) []byte {
	if !strings.ContainsAny(s, "\\\n\"") {
		return append(buf, s...)
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			buf = append(buf, '\\', '\\')
		case c == '\n':
			buf = append(buf, '\\', 'n')
		case c == '"' && quote:
			buf = append(buf, '\\', '"')
		default:
			buf = append(buf, c)
		}
	}
	return buf
}

// appendFloat writes a value as expfmt does.
func appendFloat(buf []byte, f float64) []byte {
	switch {
	case f == 1:
		return append(buf, '1')
	case f == 0:
		return append(buf, '0')
	case f == -1:
		return append(buf, "-1"...)
	case math.IsNaN(f):
		return append(buf, "NaN"...)
	case math.IsInf(f, 1):
		return append(buf, "+Inf"...)
	case math.IsInf(f, -1):
		return append(buf, "-Inf"...)
	}
	return strconv.AppendFloat(buf, f, 'g', -1, 64)
}
