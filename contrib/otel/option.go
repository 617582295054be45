package redlockotel

import "go.opentelemetry.io/otel/attribute"

// Option changes a setting of New.
type Option func(*config)

type config struct {
	attrs   []attribute.KeyValue
	withKey bool
}

// WithAttributes adds attributes to every measurement, for example the name
// of the Redis cluster or of the service. They must not use the keys the
// Observer sets itself: outcome, reason, op, node, addr, vote and key.
// Given more than once, the attributes add up.
func WithAttributes(kvs ...attribute.KeyValue) Option {
	return func(c *config) { c.attrs = append(c.attrs, kvs...) }
}

// WithKeyAttribute adds the lock key, attribute key, to every measurement
// (for a multi-key lock, the keys joined as redlock.Stats.Key reports
// them). The default is off: each key makes new time series, so turn it on
// only for a small, fixed set of keys. Tokens are never recorded.
func WithKeyAttribute(enabled bool) Option {
	return func(c *config) { c.withKey = enabled }
}
