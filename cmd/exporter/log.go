package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/wattrace/wattrace/pkg/config"
)

// newLogger builds the zap logger: logfmt-like console lines or JSON, to w.
func newLogger(c config.Log, w io.Writer) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(c.Level)); err != nil {
		return nil, fmt.Errorf("log.level %q: %w", c.Level, err)
	}
	ec := zap.NewProductionEncoderConfig()
	ec.TimeKey = "ts"
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	switch c.Format {
	case "json":
		enc = zapcore.NewJSONEncoder(ec)
	case "logfmt":
		enc = zapcore.NewConsoleEncoder(ec)
	default:
		return nil, fmt.Errorf("log.format %q: allowed %v", c.Format, config.LogFormats)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl), zap.AddCaller()), nil
}

// slogHandler sends exporter-toolkit's slog records to zap, so the web
// server logs in the same format and at the same level as the rest.
// (zap's own slog bridge lives in a module wattrace does not depend on.)
type slogHandler struct {
	core   zapcore.Core
	name   string
	fields []zap.Field
	group  string
}

func newSlogLogger(l *zap.Logger, name string) *slog.Logger {
	return slog.New(&slogHandler{core: l.Core(), name: name})
}

func zapLevel(l slog.Level) zapcore.Level {
	switch {
	case l >= slog.LevelError:
		return zapcore.ErrorLevel
	case l >= slog.LevelWarn:
		return zapcore.WarnLevel
	case l >= slog.LevelInfo:
		return zapcore.InfoLevel
	default:
		return zapcore.DebugLevel
	}
}

func (h *slogHandler) Enabled(_ context.Context, l slog.Level) bool {
	return h.core.Enabled(zapLevel(l))
}

func (h *slogHandler) Handle(_ context.Context, r slog.Record) error {
	ce := h.core.Check(zapcore.Entry{Level: zapLevel(r.Level), Time: r.Time, Message: r.Message, LoggerName: h.name}, nil)
	if ce == nil {
		return nil
	}
	fields := append(make([]zap.Field, 0, len(h.fields)+r.NumAttrs()), h.fields...)
	r.Attrs(func(a slog.Attr) bool {
		fields = append(fields, h.field(a))
		return true
	})
	ce.Write(fields...)
	return nil
}

func (h *slogHandler) field(a slog.Attr) zap.Field {
	key := a.Key
	if h.group != "" {
		key = h.group + "." + key
	}
	v := a.Value.Resolve()
	if err, ok := v.Any().(error); ok {
		return zap.NamedError(key, err)
	}
	return zap.Any(key, v.Any())
}

func (h *slogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	n := *h
	n.fields = append(append([]zap.Field(nil), h.fields...), make([]zap.Field, 0, len(as))...)
	for _, a := range as {
		n.fields = append(n.fields, h.field(a))
	}
	return &n
}

func (h *slogHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	n := *h
	if n.group != "" {
		n.group += "." + name
	} else {
		n.group = name
	}
	return &n
}
