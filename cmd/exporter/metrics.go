package main

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/collector"
	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/internal/stats"
)

// sharedMetrics serves the telemetry path from one rendering per snapshot
// and format: the first scrape of a snapshot gathers and encodes it, and
// every scrape of the same snapshot, concurrent or later, is served those
// bytes (gzipped once when asked). Building the families is most of a
// scrape's CPU and all of its garbage; four parallel scrapes each building
// their own used to quadruple both. What a scrape shows comes from the
// snapshot, so it changes only with it; the per-collector scrape metrics
// and the exporter's own metrics in a body are those of its rendering.
// Before the first snapshot each request gathers (errors and all) through
// the fallback.
type sharedMetrics struct {
	src      collector.SnapshotSource
	reg      prometheus.Gatherer
	fallback http.Handler
	// text and rest, when set, render the text format without the
	// registry's protobuf round trip: the exporter's families from its own
	// text path (collector.Exporter.AppendText, the registry's output byte
	// for byte), the rest (Go runtime, process, handler) gathered, merged
	// in name order. reg still serves every other format.
	text    textRenderer
	rest    prometheus.Gatherer
	log     *zap.Logger
	formats []expfmt.Format

	mu   sync.Mutex
	snap *snapshot.Snapshot
	by   map[expfmt.Format]*rendering

	// enc is the one gzip writer, reset for each rendering: a new writer
	// allocates its compressor's tables (about 800 KiB, half of a scrape's
	// garbage at 200 jobs) every time. It is klauspost/compress's, which
	// promhttp already brings in: at its fastest level it compresses the
	// 200 jobs' 240 kB in half the standard library's time (0.48 against
	// 0.97 ms), a little smaller. body and gzLen are the last rendering's
	// lengths, so the next one's buffers are allocated once at about their
	// final size instead of doubling their way there.
	enc struct {
		sync.Mutex
		zw          *gzip.Writer
		body, gzLen int
		// own is the exporter's text, kept for the next rendering.
		own []byte
	}
	// last is the format and encoding the latest scrape asked for: a
	// snapshot stepped ahead of the next scrape is rendered so (prepare).
	last struct {
		sync.Mutex
		format expfmt.Format
		gzip   bool
	}
}

// rendering is one snapshot encoded in one format.
type rendering struct {
	once   sync.Once
	body   []byte
	gzOnce sync.Once
	gz     []byte
}

// textRenderer renders a collector's families in the text format;
// *collector.Exporter implements it.
type textRenderer interface {
	AppendText(buf []byte) ([]byte, []collector.TextFamily, []error)
}

var _ textRenderer = (*collector.Exporter)(nil)

func newSharedMetrics(src collector.SnapshotSource, reg prometheus.Gatherer, fallback http.Handler, log *zap.Logger) *sharedMetrics {
	return &sharedMetrics{src: src, reg: reg, fallback: fallback, log: log, formats: expfmt.DefaultAcceptedFormats()}
}

// freshSource steps its loop when the latest snapshot is older than
// maxAge (0: its interval); *stats.Loop implements it. A scrape asks for
// fresh figures through it, which is what drives the loop on demand.
type freshSource interface {
	Fresh(ctx context.Context, maxAge time.Duration) *snapshot.Snapshot
}

// stepAheadSource tells of snapshots stepped ahead of an expected scrape;
// *stats.Loop implements it.
type stepAheadSource interface {
	OnStepAhead(fn func(*snapshot.Snapshot))
}

var (
	_ freshSource     = (*stats.Loop)(nil)
	_ stepAheadSource = (*stats.Loop)(nil)
)

func (h *sharedMetrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var snap *snapshot.Snapshot
	if f, ok := h.src.(freshSource); ok {
		snap = f.Fresh(r.Context(), 0)
	} else {
		snap = h.src.Snapshot()
	}
	if snap == nil {
		h.fallback.ServeHTTP(w, r)
		return
	}
	// The formats promhttp offers without OpenMetrics, which wattrace's
	// handler never enabled.
	format := expfmt.NegotiateAccept(r.Header, h.formats...)
	gz := acceptsGzip(r.Header.Get("Accept-Encoding"))
	h.last.Lock()
	h.last.format, h.last.gzip = format, gz
	h.last.Unlock()
	rd := h.rendering(snap, format)
	rd.once.Do(func() { rd.body = h.render(format) })
	body := rd.body
	w.Header().Set("Content-Type", string(format))
	if gz {
		rd.gzOnce.Do(func() { rd.gz = h.gzipped(rd.body) })
		body = rd.gz
		w.Header().Set("Content-Encoding", "gzip")
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	if _, err := w.Write(body); err != nil {
		h.log.Debug("write metrics", zap.Error(err))
	}
}

// prepare renders snap as the latest scrape asked for, before the next
// scrape comes: the loop steps ahead of a scrape it expects
// (stats.Loop.OnStepAhead), and with the rendering done too that scrape
// is a copy. The CPU is the one rendering per snapshot there always was.
func (h *sharedMetrics) prepare(snap *snapshot.Snapshot) {
	h.last.Lock()
	format, gz := h.last.format, h.last.gzip
	h.last.Unlock()
	if snap == nil || format == "" {
		return
	}
	rd := h.rendering(snap, format)
	rd.once.Do(func() { rd.body = h.render(format) })
	if gz {
		rd.gzOnce.Do(func() { rd.gz = h.gzipped(rd.body) })
	}
}

// rendering returns the snapshot's rendering in a format, dropping the
// previous snapshot's: only one snapshot's bytes are ever kept.
func (h *sharedMetrics) rendering(snap *snapshot.Snapshot, f expfmt.Format) *rendering {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.snap != snap {
		h.snap, h.by = snap, map[expfmt.Format]*rendering{}
	}
	rd := h.by[f]
	if rd == nil {
		rd = &rendering{}
		h.by[f] = rd
	}
	return rd
}

// render gathers and encodes. A failing collector costs only its own
// series (as promhttp.ContinueOnError): its failure shows in
// wattrace_scrape_collector_success, and what was gathered is served.
func (h *sharedMetrics) render(f expfmt.Format) []byte {
	if h.text != nil && f.FormatType() == expfmt.TypeTextPlain {
		return h.renderText(f)
	}
	mfs, err := h.reg.Gather()
	if err != nil {
		h.log.Warn("gathering metrics", zap.Error(err))
	}
	h.enc.Lock()
	size := h.enc.body
	h.enc.Unlock()
	var buf bytes.Buffer
	buf.Grow(size + size/16)
	enc := expfmt.NewEncoder(&buf, f)
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			h.log.Warn("encoding metrics", zap.String("family", mf.GetName()), zap.Error(err))
		}
	}
	if c, ok := enc.(expfmt.Closer); ok {
		_ = c.Close()
	}
	h.enc.Lock()
	h.enc.body = buf.Len()
	h.enc.Unlock()
	return buf.Bytes()
}

// renderText renders the text format: the exporter's families from its
// own text path, merged in name order with the rest gathered and encoded,
// as Gather's sorted families would be encoded.
func (h *sharedMetrics) renderText(f expfmt.Format) []byte {
	h.enc.Lock()
	defer h.enc.Unlock()
	own, fams, errs := h.text.AppendText(h.enc.own[:0])
	h.enc.own = own
	for _, err := range errs {
		h.log.Warn("gathering metrics", zap.Error(err))
	}
	mfs, err := h.rest.Gather()
	if err != nil {
		h.log.Warn("gathering metrics", zap.Error(err))
	}
	var buf bytes.Buffer
	buf.Grow(max(h.enc.body+h.enc.body/16, len(own)+64<<10))
	enc := expfmt.NewEncoder(&buf, f)
	for len(fams) > 0 || len(mfs) > 0 {
		if len(mfs) == 0 || (len(fams) > 0 && fams[0].Name < mfs[0].GetName()) {
			buf.Write(own[fams[0].Start:fams[0].End])
			fams = fams[1:]
			continue
		}
		if err := enc.Encode(mfs[0]); err != nil {
			h.log.Warn("encoding metrics", zap.String("family", mfs[0].GetName()), zap.Error(err))
		}
		mfs = mfs[1:]
	}
	h.enc.body = buf.Len()
	return buf.Bytes()
}

// gzipped compresses b with the shared writer (one compression at a time:
// renderings of one snapshot in two formats are rare).
func (h *sharedMetrics) gzipped(b []byte) []byte {
	h.enc.Lock()
	defer h.enc.Unlock()
	var buf bytes.Buffer
	buf.Grow(h.enc.gzLen + h.enc.gzLen/8)
	if h.enc.zw == nil {
		h.enc.zw, _ = gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	} else {
		h.enc.zw.Reset(&buf)
	}
	_, _ = h.enc.zw.Write(b)
	_ = h.enc.zw.Close()
	h.enc.gzLen = buf.Len()
	return buf.Bytes()
}

// acceptsGzip reports whether an Accept-Encoding header allows gzip
// (present without q=0).
func acceptsGzip(h string) bool {
	for _, part := range strings.Split(h, ",") {
		enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.TrimSpace(enc) != "gzip" {
			continue
		}
		q := 1.0
		if v, ok := strings.CutPrefix(strings.TrimSpace(params), "q="); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				q = f
			}
		}
		return q > 0
	}
	return false
}
