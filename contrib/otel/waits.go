package redlockotel

import (
	"context"
	"errors"

	"github.com/redlockgo/redlock"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// This file is what the Observer makes of redlock's wait and hold events:
// the waiters' count, the wait and hold durations, and a span per call.

// defaultClass is the key class of every lock without WithKeyClass.
const defaultClass = "default"

// spanName is the name of the span of every acquisition call.
const spanName = "redlock.Lock"

// Span attribute keys. Spans share a trace with other libraries' spans, so
// their attributes are namespaced, as the metrics are by their names.
const (
	spanKeyClass = attribute.Key("redlock.key_class")
	spanKind     = attribute.Key("redlock.kind")
	spanKey      = attribute.Key("redlock.key")
	spanAttempts = attribute.Key("redlock.attempts")
	spanWaited   = attribute.Key("redlock.waited")
	spanOutcome  = attribute.Key("redlock.outcome")
	spanPlace    = attribute.Key("redlock.queue.place")
)

// WaitBegan counts a call that begins to wait in redlock.lock.waiters.
func (o *Observer) WaitBegan(w redlock.WaitInfo) {
	o.waiters.Add(context.Background(), 1, o.classSet(w.Key, w.Kind, ""))
}

// WaitEnded takes a call that waited out of redlock.lock.waiters, and
// records how long it waited, and how it ended, in
// redlock.lock.wait.duration.
func (o *Observer) WaitEnded(r redlock.WaitResult) {
	ctx := context.Background()
	o.waiters.Add(ctx, -1, o.classSet(r.Key, r.Kind, ""))
	o.waitDuration.Record(ctx, r.Waited.Seconds(), o.classSet(r.Key, r.Kind, outcomeOf(r.Err, "acquired", "not_acquired")))
}

// HoldEnded records how long a lock was held, and how the hold ended, in
// redlock.lock.held.duration.
func (o *Observer) HoldEnded(r redlock.HoldResult) {
	outcome := "released"
	switch {
	case errors.Is(r.Err, redlock.ErrLockLost):
		outcome = "lost"
	case r.Err != nil:
		outcome = "not_released"
	}
	o.heldDuration.Record(context.Background(), r.Held.Seconds(), o.classSet(r.Key, r.Kind, outcome))
}

// TraceLock starts the span of an acquisition call, as a child of the
// span in ctx, and returns what ends it.
func (o *Observer) TraceLock(ctx context.Context, w redlock.WaitInfo) func(redlock.WaitResult) {
	attrs := make([]attribute.KeyValue, 0, len(o.base)+3)
	attrs = append(attrs, o.base...)
	attrs = append(attrs, spanKeyClass.String(o.class(w.Key)), spanKind.String(string(w.Kind)))
	if o.withKey {
		attrs = append(attrs, spanKey.String(w.Key))
	}
	_, span := o.tracer.Start(ctx, spanName, trace.WithAttributes(attrs...))
	return func(r redlock.WaitResult) {
		span.SetAttributes(
			spanAttempts.Int(r.Attempts),
			spanWaited.Float64(r.Waited.Seconds()),
			spanOutcome.String(outcomeOf(r.Err, "acquired", "not_acquired")),
		)
		if r.Place > 0 {
			span.SetAttributes(spanPlace.Int(r.Place))
		}
		if r.Err != nil {
			span.RecordError(r.Err)
			span.SetStatus(codes.Error, r.Err.Error())
		}
		span.End()
	}
}

// class is the key class of the lock named key.
func (o *Observer) class(key string) string {
	if o.keyClass == nil {
		return defaultClass
	}
	return o.keyClass(key)
}

// classKey names the attribute set of a wait or hold measurement.
type classKey struct {
	class   string
	kind    redlock.Kind
	outcome string // "" for the waiters' count
}

// classSet is the attribute set of a wait or hold measurement about the
// lock named key, of kind, with outcome unless it is "". Each set is built
// once: the classes, kinds and outcomes are few.
func (o *Observer) classSet(key string, kind redlock.Kind, outcome string) metric.MeasurementOption {
	ck := classKey{class: o.class(key), kind: kind, outcome: outcome}
	if opt, ok := o.classSets.Load(ck); ok {
		return opt.(metric.MeasurementOption)
	}
	all := make([]attribute.KeyValue, 0, len(o.base)+3)
	all = append(all, o.base...)
	all = append(all, keyKeyClass.String(ck.class), keyKind.String(string(kind)))
	if outcome != "" {
		all = append(all, keyOutcome.String(outcome))
	}
	opt, _ := o.classSets.LoadOrStore(ck, metric.WithAttributeSet(attribute.NewSet(all...)))
	return opt.(metric.MeasurementOption)
}
