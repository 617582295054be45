// Package redlockotel reports what a redlock.Client does as OpenTelemetry
// metrics, and traces each acquisition call with a span. It is a module of
// its own, so that the redlock module does not depend on OpenTelemetry.
//
// Create an Observer from a MeterProvider and give it to the Client:
//
//	obs, err := redlockotel.New(otel.GetMeterProvider())
//	if err != nil {
//		return err
//	}
//	client, err := redlock.New(nodes, redlock.WithObserver(obs))
//
// The Observer records these instruments, under the instrumentation scope
// github.com/redlockgo/redlock/contrib/otel:
//
//	redlock.attempts          counter    {attempt}    outcome
//	redlock.attempt.duration  histogram  s            outcome
//	redlock.validity          histogram  s
//	redlock.node.votes        counter    {vote}       op, node, addr, vote
//	redlock.extensions        counter    {extension}  outcome
//	redlock.releases          counter    {release}    outcome
//	redlock.losses            counter    {loss}       reason
//	redlock.lock.waiters        updowncounter  {waiter}  key_class, kind
//	redlock.lock.wait.duration  histogram      s         key_class, kind, outcome
//	redlock.lock.held.duration  histogram      s         key_class, kind, outcome
//
// redlock.attempts counts each acquisition attempt (Lock retries count once
// each), with outcome acquired, not_acquired, or cancelled when the caller's
// ctx ended the attempt. redlock.attempt.duration is each attempt's
// Stats.Elapsed, and redlock.validity the Stats.Validity of each attempt that
// won. redlock.extensions counts extensions, by Extend and by auto-extension,
// with outcome extended, not_extended or cancelled; redlock.releases counts
// each Unlock that reached the nodes, with outcome released, not_released or
// cancelled. redlock.losses counts the locks that ended without Unlock, with
// reason max_hold (WithMaxHold's cap was reached), not_held (a quorum of
// nodes no longer held the token) or expired (the validity ran out before a
// renewal succeeded).
//
// redlock.node.votes counts each node's vote in each round, with op lock,
// extend or unlock, node (the node's index in the slice given to
// redlock.New), addr (its address) and vote: yes, no, failed (the node
// answered with an error) or unanswered (it had not answered when the round
// was decided: it timed out, or a quorum was reached or lost without it).
// Rounds of auto-extension carry no per-node votes, so they add nothing here.
//
// redlock.lock.waiters is the number of acquisition calls waiting for a
// lock now: +1 at redlock.WaitBeganObserver's WaitBegan, -1 at WaitEnded,
// which redlock pairs exactly, Close included, so it returns to 0.
// redlock.lock.wait.duration is each such call's WaitResult.Waited (from
// the call's start to its return), with outcome acquired, not_acquired or
// cancelled; calls that won at their first attempt, and TryLock, never
// wait and are not in it (redlock.attempts counts them).
// redlock.lock.held.duration is how long each Lock was held, from the call's
// return to Unlock or to the loss (redlock.HoldResult.Held), with outcome
// released, not_released or lost. kind is the redlock.Kind of the hold:
// lock, owner, fair, read, permit or election. key_class is the class that
// WithKeyClass maps the lock's name to, "default" without it: these three
// never carry the raw key, even with WithKeyAttribute.
//
// The Observer is also a redlock.LockTracer: each acquisition call (Lock,
// TryLock, LockMulti, RLock, a Semaphore's Acquire, Campaign) gets a span
// named redlock.Lock, a child of the span in the caller's ctx, from the
// TracerProvider of WithTracerProvider (otel.GetTracerProvider() by
// default). It carries redlock.key_class, redlock.kind, redlock.attempts,
// redlock.waited (seconds), redlock.outcome, redlock.queue.place for a fair
// call that learned its place, and redlock.key with WithKeyAttribute; its
// status is Error, with the error recorded, when the call did not acquire.
//
// The lock key is not an attribute unless WithKeyAttribute asks for it, and
// tokens never are: keys are often unbounded in number, which metric
// backends handle badly.
package redlockotel

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redlockgo/redlock"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// scope is the instrumentation scope of the Observer's meter.
const scope = "github.com/redlockgo/redlock/contrib/otel"

// Attribute keys the Observer sets itself. WithAttributes may not use them.
const (
	keyOutcome = attribute.Key("outcome")
	keyReason  = attribute.Key("reason")
	keyOp      = attribute.Key("op")
	keyNode    = attribute.Key("node")
	keyAddr    = attribute.Key("addr")
	keyVote    = attribute.Key("vote")
	keyKey     = attribute.Key("key")
	// key_class, not key.class: "key" is an attribute of its own, and an
	// OpenTelemetry name should not be both an attribute and a namespace.
	keyKeyClass = attribute.Key("key_class")
	keyKind     = attribute.Key("kind")
)

var reserved = []attribute.Key{keyOutcome, keyReason, keyOp, keyNode, keyAddr, keyVote, keyKey, keyKeyClass, keyKind}

// Bucket boundaries, in seconds, advised to the SDK; a View overrides them.
// A round is bounded by the node timeout (at most 100 ms by default); a
// validity is close to the TTL (10 s by default).
// A wait or a hold lasts from a millisecond to minutes.
var (
	durationBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	validityBuckets = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 600}
	holdBuckets     = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
)

// ErrInvalidOption is wrapped by the error New returns for a nil
// MeterProvider or a bad option. The message names the problem.
var ErrInvalidOption = errors.New("redlockotel: invalid option")

// Observer is a redlock.Observer that records OpenTelemetry metrics. It is
// safe for concurrent use, as redlock.Observer requires, and its methods do
// no I/O: the MeterProvider's reader exports later. Create it with New; the
// zero value is not usable. It must not be copied. One Observer may serve
// several Clients.
type Observer struct {
	base    []attribute.KeyValue // from WithAttributes; read-only after New
	withKey bool

	// Without the key attribute, every attribute set comes from a small,
	// bounded family (outcomes, reasons, one per node and vote), so each is
	// built once: building one costs more than the measurement.
	plain     metric.MeasurementOption // the set with no label; nil with the key
	labelSets sync.Map                 // labelKey → metric.MeasurementOption
	voteSets  sync.Map                 // voteKey → metric.MeasurementOption
	// classSets holds the sets of the wait and hold instruments, which
	// never carry the key: classKey → metric.MeasurementOption.
	classSets sync.Map

	keyClass func(key string) string // from WithKeyClass; nil: "default"
	tracer   trace.Tracer

	attempts        metric.Int64Counter
	attemptDuration metric.Float64Histogram
	validity        metric.Float64Histogram
	votes           metric.Int64Counter
	extensions      metric.Int64Counter
	releases        metric.Int64Counter
	losses          metric.Int64Counter
	waiters         metric.Int64UpDownCounter
	waitDuration    metric.Float64Histogram
	heldDuration    metric.Float64Histogram
}

var (
	_ redlock.Observer          = (*Observer)(nil)
	_ redlock.WaitBeganObserver = (*Observer)(nil)
	_ redlock.WaitEndedObserver = (*Observer)(nil)
	_ redlock.HoldEndedObserver = (*Observer)(nil)
	_ redlock.LockTracer        = (*Observer)(nil)
)

// New returns an Observer that records on a meter of mp. Pass
// otel.GetMeterProvider() to use the global MeterProvider.
//
// New fails, with an error that wraps ErrInvalidOption and names the
// problem, when mp is nil, WithTracerProvider was given nil, or an
// attribute given to WithAttributes has an empty key, no value, or a key
// the Observer sets itself. It also fails when mp refuses to create an
// instrument; the error then joins mp's errors.
func New(mp metric.MeterProvider, opts ...Option) (*Observer, error) {
	if mp == nil {
		return nil, fmt.Errorf("%w: nil MeterProvider (pass otel.GetMeterProvider() for the global one)", ErrInvalidOption)
	}
	var cfg config
	for _, opt := range opts {
		opt(&cfg)
	}
	if cfg.tpSet && cfg.tp == nil {
		return nil, fmt.Errorf("%w: nil TracerProvider (pass otel.GetTracerProvider() for the global one)", ErrInvalidOption)
	}
	if !cfg.tpSet {
		cfg.tp = otel.GetTracerProvider()
	}
	for _, kv := range cfg.attrs {
		if !kv.Valid() {
			return nil, fmt.Errorf("%w: attribute with an empty key", ErrInvalidOption)
		}
		if kv.Value.Type() == attribute.EMPTY {
			return nil, fmt.Errorf("%w: attribute %q has no value", ErrInvalidOption, kv.Key)
		}
		for _, k := range reserved {
			if kv.Key == k {
				return nil, fmt.Errorf("%w: attribute %q is set by the observer", ErrInvalidOption, kv.Key)
			}
		}
	}

	m := mp.Meter(scope)
	o := &Observer{base: cfg.attrs, withKey: cfg.withKey, keyClass: cfg.keyClass, tracer: cfg.tp.Tracer(scope)}
	if !o.withKey {
		o.plain = o.attrs("")
	}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	histogram := func(name, desc string, buckets []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(buckets...))
		errs = append(errs, err)
		return h
	}
	o.attempts = counter("redlock.attempts", "{attempt}", "Lock acquisition attempts, by outcome.")
	o.attemptDuration = histogram("redlock.attempt.duration", "Time a lock acquisition attempt took, from the first request to the decision.", durationBuckets)
	o.validity = histogram("redlock.validity", "Validity left to a lock when it was acquired: TTL minus elapsed time minus clock drift.", validityBuckets)
	o.votes = counter("redlock.node.votes", "{vote}", "Votes of each Redis node in lock, extend and unlock rounds.")
	o.extensions = counter("redlock.extensions", "{extension}", "Lock extensions, by Extend and by auto-extension, by outcome.")
	o.releases = counter("redlock.releases", "{release}", "Unlocks that reached the nodes, by outcome.")
	o.losses = counter("redlock.losses", "{loss}", "Locks that ended without Unlock, by reason.")
	waiters, err := m.Int64UpDownCounter("redlock.lock.waiters", metric.WithUnit("{waiter}"),
		metric.WithDescription("Lock calls waiting for a lock now, by key class and kind."))
	errs = append(errs, err)
	o.waiters = waiters
	o.waitDuration = histogram("redlock.lock.wait.duration", "Time Lock calls that waited spent, from the call's start to its return, by outcome.", holdBuckets)
	o.heldDuration = histogram("redlock.lock.held.duration", "Time a lock was held, from its acquisition call's return to Unlock or its loss, by outcome.", holdBuckets)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("redlockotel: creating instruments: %w", err)
	}
	return o, nil
}

// Attempted records an acquisition attempt: its outcome, its duration, the
// validity it won, and each node's vote.
func (o *Observer) Attempted(s redlock.Stats, err error) {
	outcome := o.label(s.Key, keyOutcome, outcomeOf(err, "acquired", "not_acquired"))
	ctx := context.Background()
	o.attempts.Add(ctx, 1, outcome)
	o.attemptDuration.Record(ctx, s.Elapsed.Seconds(), outcome)
	if err == nil {
		plain := o.plain
		if o.withKey {
			plain = o.attrs(s.Key)
		}
		o.validity.Record(ctx, s.Validity.Seconds(), plain)
	}
	o.recordVotes(s)
}

// Extended records an extension's outcome and, for one made by Extend, each
// node's vote.
func (o *Observer) Extended(s redlock.Stats, err error) {
	o.extensions.Add(context.Background(), 1, o.label(s.Key, keyOutcome, outcomeOf(err, "extended", "not_extended")))
	o.recordVotes(s)
}

// Lost records a lock that ended without Unlock, with the reason.
func (o *Observer) Lost(key string, err error) {
	reason := "expired"
	switch {
	case errors.Is(err, redlock.ErrMaxHold):
		reason = "max_hold"
	case errors.Is(err, redlock.ErrNotHeld):
		reason = "not_held"
	}
	o.losses.Add(context.Background(), 1, o.label(key, keyReason, reason))
}

// Released records an Unlock's outcome and each node's vote.
func (o *Observer) Released(s redlock.Stats, err error) {
	o.releases.Add(context.Background(), 1, o.label(s.Key, keyOutcome, outcomeOf(err, "released", "not_released")))
	o.recordVotes(s)
}

// recordVotes adds one vote per node of the round.
func (o *Observer) recordVotes(s redlock.Stats) {
	ctx := context.Background()
	for _, v := range s.Nodes {
		o.votes.Add(ctx, 1, o.vote(s.Key, s.Op, v))
	}
}

// labelKey names the attribute set of a measurement with one label.
type labelKey struct {
	key   attribute.Key
	value string
}

// voteKey names the attribute set of one node's vote.
type voteKey struct {
	op, addr, vote string
	node           int
}

// label is the attribute set of a measurement about key with one label k=v.
func (o *Observer) label(key string, k attribute.Key, v string) metric.MeasurementOption {
	if o.withKey {
		return o.attrs(key, k.String(v))
	}
	lk := labelKey{k, v}
	if opt, ok := o.labelSets.Load(lk); ok {
		return opt.(metric.MeasurementOption)
	}
	opt, _ := o.labelSets.LoadOrStore(lk, o.attrs("", k.String(v)))
	return opt.(metric.MeasurementOption)
}

// vote is the attribute set of node v's vote in a round of op on key.
func (o *Observer) vote(key, op string, v redlock.NodeVote) metric.MeasurementOption {
	vk := voteKey{op: op, addr: v.Addr, vote: voteOf(v), node: v.Index}
	build := func() metric.MeasurementOption {
		return o.attrs(key, keyOp.String(vk.op), keyNode.Int(vk.node), keyAddr.String(vk.addr), keyVote.String(vk.vote))
	}
	if o.withKey {
		return build()
	}
	if opt, ok := o.voteSets.Load(vk); ok {
		return opt.(metric.MeasurementOption)
	}
	opt, _ := o.voteSets.LoadOrStore(vk, build())
	return opt.(metric.MeasurementOption)
}

// attrs is the attribute set of one measurement: the WithAttributes ones,
// the key when asked for, and kvs.
func (o *Observer) attrs(key string, kvs ...attribute.KeyValue) metric.MeasurementOption {
	all := make([]attribute.KeyValue, 0, len(o.base)+1+len(kvs))
	all = append(all, o.base...)
	if o.withKey {
		all = append(all, keyKey.String(key))
	}
	all = append(all, kvs...)
	return metric.WithAttributeSet(attribute.NewSet(all...))
}

// outcomeOf names the outcome of a round: ok when err is nil, cancelled when
// the caller's ctx ended it, failed otherwise.
func outcomeOf(err error, ok, failed string) string {
	switch {
	case err == nil:
		return ok
	case cancelled(err):
		return "cancelled"
	default:
		return failed
	}
}

// cancelled reports whether err carries context.Canceled or
// context.DeadlineExceeded outside of any *redlock.NodeError. A node that
// timed out inside its own request context can fail with DeadlineExceeded
// while the caller's ctx is fine, and a redlock.QuorumError unwraps to each
// node's error: errors.Is alone would count that attempt as cancelled.
func cancelled(err error) bool {
	if err == nil {
		return false
	}
	if _, ok := err.(*redlock.NodeError); ok {
		return false
	}
	if err == context.Canceled || err == context.DeadlineExceeded {
		return true
	}
	if x, ok := err.(interface{ Is(error) bool }); ok && (x.Is(context.Canceled) || x.Is(context.DeadlineExceeded)) {
		return true
	}
	switch x := err.(type) {
	case interface{ Unwrap() error }:
		return cancelled(x.Unwrap())
	case interface{ Unwrap() []error }:
		for _, e := range x.Unwrap() {
			if cancelled(e) {
				return true
			}
		}
	}
	return false
}

// voteOf names a node's vote: a node that had not answered when the round
// was decided is "unanswered", whether the round went on without it
// (VoteNotWaited) or it timed out (a VoteFailed with no latency).
func voteOf(v redlock.NodeVote) string {
	if v.Vote == redlock.VoteNotWaited || (v.Vote == redlock.VoteFailed && v.Latency == 0) {
		return "unanswered"
	}
	return v.Vote.String()
}
