package webhook

import (
	"context"
	"fmt"
	"maps"

	"github.com/rs/zerolog"
	kwhlog "github.com/slok/kubewebhook/v2/pkg/log"
)

// kwhLogger adapts zerolog to kubewebhook's logger. kubewebhook logs every handled
// request at info level; that is debug for an admission webhook under load.
type kwhLogger struct {
	log    zerolog.Logger
	fields kwhlog.Kv
}

var _ kwhlog.Logger = kwhLogger{}

// NewKubewebhookLogger returns a kubewebhook logger writing to log.
func NewKubewebhookLogger(log zerolog.Logger) kwhlog.Logger { return kwhLogger{log: log} }

func (l kwhLogger) Infof(format string, args ...any)    { l.event(l.log.Debug(), format, args) }
func (l kwhLogger) Debugf(format string, args ...any)   { l.event(l.log.Debug(), format, args) }
func (l kwhLogger) Warningf(format string, args ...any) { l.event(l.log.Warn(), format, args) }
func (l kwhLogger) Errorf(format string, args ...any)   { l.event(l.log.Error(), format, args) }

func (l kwhLogger) event(e *zerolog.Event, format string, args []any) {
	// Fields are kept in a map and added once: kubewebhook sets some keys twice.
	e.Fields(map[string]any(l.fields)).Msg(fmt.Sprintf(format, args...))
}

func (l kwhLogger) WithValues(values kwhlog.Kv) kwhlog.Logger {
	fields := maps.Clone(l.fields)
	if fields == nil {
		fields = kwhlog.Kv{}
	}
	maps.Copy(fields, values)
	return kwhLogger{log: l.log, fields: fields}
}

type ctxFieldsKey struct{}

func (l kwhLogger) SetValuesOnCtx(parent context.Context, values kwhlog.Kv) context.Context {
	fields := kwhlog.Kv{}
	if prev, ok := parent.Value(ctxFieldsKey{}).(kwhlog.Kv); ok {
		maps.Copy(fields, prev)
	}
	maps.Copy(fields, values)
	return context.WithValue(parent, ctxFieldsKey{}, fields)
}

func (l kwhLogger) WithCtxValues(ctx context.Context) kwhlog.Logger {
	if fields, ok := ctx.Value(ctxFieldsKey{}).(kwhlog.Kv); ok {
		return l.WithValues(fields)
	}
	return l
}
