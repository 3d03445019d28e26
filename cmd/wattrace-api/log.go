package main

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	zaplogfmt "github.com/jsternberg/zap-logfmt"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"
	"go.uber.org/zap/zapcore"
)

// newLogger writes logfmt (ts=… level=info caller=… msg=…) or JSON, as
// the exporter does.
func newLogger(c Log, w io.Writer) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(c.Level)); err != nil {
		return nil, fmt.Errorf("log.level %q: %w", c.Level, err)
	}
	ec := zap.NewProductionEncoderConfig()
	ec.TimeKey = "ts"
	ec.EncodeTime = func(t time.Time, enc zapcore.PrimitiveArrayEncoder) {
		enc.AppendString(t.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	}
	ec.EncodeDuration = zapcore.StringDurationEncoder
	var enc zapcore.Encoder
	switch c.Format {
	case "json":
		enc = zapcore.NewJSONEncoder(ec)
	case "logfmt":
		enc = zaplogfmt.NewEncoder(ec)
	default:
		return nil, fmt.Errorf("log.format %q: allowed %v", c.Format, LogFormats)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl), zap.AddCaller()), nil
}

// slogFor gives exporter-toolkit (and the API handlers) an slog.Logger
// that writes through zap, in the same format and level.
func slogFor(l *zap.Logger, name string) *slog.Logger {
	return slog.New(zapslog.NewHandler(l.Core(), zapslog.WithName(name), zapslog.WithCaller(true)))
}
