package cli

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	zaplogfmt "github.com/jsternberg/zap-logfmt"
	"go.uber.org/zap"
	"go.uber.org/zap/buffer"
	"go.uber.org/zap/exp/zapslog"
	"go.uber.org/zap/zapcore"

	"github.com/wattrace/wattrace/internal/setting"
)

// Log levels and formats, the allowed values of log.level and log.format.
var (
	LogLevels  = []string{"debug", "info", "warn", "error"}
	LogFormats = []string{"logfmt", "json"}
)

// Log is the log.* settings: the logger's level and format.
type Log struct{ Level, Format string }

// Declare declares log.level and log.format, bound to l.
func (l *Log) Declare(s *setting.Set) {
	s.Enum(&l.Level, "log.level", "info", LogLevels, "Log level: "+strings.Join(LogLevels, ", ")+".")
	s.Enum(&l.Format, "log.format", "logfmt", LogFormats, "Log format: "+strings.Join(LogFormats, ", ")+".")
}

// NewLogger builds the zap logger, writing to w either logfmt, in the shape
// node_exporter's users parse (ts=… level=info caller=file.go:12 msg=…
// key=value), or JSON with the same keys.
func NewLogger(level, format string, w io.Writer) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log.level %q: %w", level, err)
	}
	ec := zap.NewProductionEncoderConfig()
	ec.TimeKey = "ts"
	ec.EncodeTime = encodeTime
	var enc zapcore.Encoder
	switch format {
	case "json":
		enc = zapcore.NewJSONEncoder(ec)
	case "logfmt":
		ec.EncodeDuration = zapcore.StringDurationEncoder // interval=1.5s, as Go prints it
		enc = namedEncoder{zaplogfmt.NewEncoder(ec)}
	default:
		return nil, fmt.Errorf("log.format %q: allowed %v", format, LogFormats)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl), zap.AddCaller()), nil
}

// encodeTime writes UTC with milliseconds, as Prometheus's exporters do.
func encodeTime(t time.Time, enc zapcore.PrimitiveArrayEncoder) {
	enc.AppendString(t.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
}

// namedEncoder adds the logger's name (web, promhttp, …) as a logger=
// field, which the logfmt encoder would otherwise drop.
type namedEncoder struct{ zapcore.Encoder }

func (e namedEncoder) Clone() zapcore.Encoder { return namedEncoder{e.Encoder.Clone()} }

func (e namedEncoder) EncodeEntry(ent zapcore.Entry, fields []zapcore.Field) (*buffer.Buffer, error) {
	if ent.LoggerName != "" {
		fields = append([]zapcore.Field{zap.String("logger", ent.LoggerName)}, fields...)
	}
	return e.Encoder.EncodeEntry(ent, fields)
}

// SlogLogger sends exporter-toolkit's slog records to zap (zap's own
// bridge), so the web server logs in the same format and at the same level
// as the rest.
func SlogLogger(l *zap.Logger, name string) *slog.Logger {
	return slog.New(zapslog.NewHandler(l.Core(), zapslog.WithName(name), zapslog.WithCaller(true)))
}
