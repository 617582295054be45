package redlockotel

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Option changes a setting of New.
type Option func(*config)

type config struct {
	attrs    []attribute.KeyValue
	withKey  bool
	keyClass func(key string) string
	tp       trace.TracerProvider
	tpSet    bool
}

// WithAttributes adds attributes to every measurement, for example the name
// of the Redis cluster or of the service. They must not use the keys the
// Observer sets itself: outcome, reason, op, node, addr, vote, key,
// key_class and kind. Spans carry them too.
// Given more than once, the attributes add up.
func WithAttributes(kvs ...attribute.KeyValue) Option {
	return func(c *config) { c.attrs = append(c.attrs, kvs...) }
}

// WithKeyAttribute adds the lock key, attribute key, to every measurement
// (for a multi-key lock, the keys joined as redlock.Stats.Key reports
// them), but those of redlock.lock.waiters, redlock.lock.wait.duration and
// redlock.lock.held.duration, which carry the key class instead (see
// WithKeyClass); spans get it as redlock.key. The default is off: each key
// makes new time series, so turn it on only for a small, fixed set of
// keys. Tokens are never recorded.
func WithKeyAttribute(enabled bool) Option {
	return func(c *config) { c.withKey = enabled }
}

// WithKeyClass sets how the wait and hold instruments, and the spans, name
// a lock: class maps the lock's name, as redlock.Stats.Key gives it (the
// key without the Client's key prefix; a multi-key lock's keys joined by
// commas), to its class, attribute key_class. It must return few distinct
// values, since each makes new time series, and the same value for the
// same name every time, or the waiters' count drifts between classes: for
// example the part of "invoice:2024:17" before its first colon. Without
// it, or with nil, every lock is in the class "default".
func WithKeyClass(class func(key string) string) Option {
	return func(c *config) { c.keyClass = class }
}

// WithTracerProvider sets where the spans of the acquisition calls come
// from. The default is otel.GetTracerProvider() at New: the global one,
// which starts recording once the application sets it. Pass a no-op
// provider (go.opentelemetry.io/otel/trace/noop) to turn the spans off.
// A nil tp makes New fail.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp, c.tpSet = tp, true }
}
