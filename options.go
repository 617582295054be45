package redlock

import (
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Defaults of the options.
const (
	// DefaultTTL is how long a lock lives on each node unless extended.
	DefaultTTL = 10 * time.Second
	// DefaultDriftFactor is the share of the TTL allowed for clock drift.
	DefaultDriftFactor = 0.01
	// DefaultRetryDelayMin and DefaultRetryDelayMax bound the jittered wait
	// between two attempts of Lock.
	DefaultRetryDelayMin = 10 * time.Millisecond
	DefaultRetryDelayMax = 100 * time.Millisecond
)

// config holds the settings of a Client or of one call. A config is never
// changed once built, so calls share it without locking.
type config struct {
	ttl         time.Duration
	driftFactor float64
	nodeTimeout time.Duration // 0 until resolved: derived from ttl
	retryMin    time.Duration
	retryMax    time.Duration
	keyPrefix   string
	autoExtend  bool
	maxHold     time.Duration // 0: no cap
	pubsub      bool
	fencing     bool
	owner       string
	guard       bool
	label       string
	logger      *slog.Logger // New only
	observer    Observer     // New only

	// noFenceWriteBack skips the fence write-back; tests use it to show
	// that the fence can go backwards without it.
	noFenceWriteBack bool
	// sharedValue makes every attempt of an acquisition write the same
	// value, as before attempts had values of their own; the chaos
	// suite's late-delivery control uses it to show the overlap that a
	// late rollback then causes.
	sharedValue bool
	// unsafeRetries acquires with a plain SET NX, which answers no to its
	// own retry, and counts a release that finds the key gone as a no; the
	// lost-replies control uses it to show what go-redis's retries then
	// leave behind.
	unsafeRetries bool
	// majoritySemaphore gives a semaphore the lock's majority quorum
	// instead of semaphoreQuorum's; the semaphore's negative control uses
	// it to show more than k holders at once.
	majoritySemaphore bool
	// timerOnlyExpiry leaves a lock's end past Until to its expiry timer:
	// Done and Err no longer check Until themselves. The paused-holder
	// control uses it to show a holder that resumes before the runtime
	// runs its overdue timer and finds its lock still "held".
	timerOnlyExpiry bool
	// replicaAck is the number of replicas that must acknowledge a write
	// before a node's yes counts (WithReplicaAck); 0 waits for none.
	replicaAck int
	// reader makes the call a reader of a read-write lock (RLock).
	reader bool
	// noWriterPref makes a reader ignore waiting writers; the
	// writer-preference benchmark compares against it.
	noWriterPref bool
	// readerQuorum, when set, replaces a reader's majority quorum; the
	// read-write chaos control uses a minority to show a writer beside
	// readers.
	readerQuorum int

	// nodeTimeoutSet records that the user chose the node timeout, so that a
	// per-call WithTTL does not replace it with one derived from the new TTL.
	nodeTimeoutSet bool
}

func defaultConfig() config {
	return config{
		ttl:         DefaultTTL,
		driftFactor: DefaultDriftFactor,
		retryMin:    DefaultRetryDelayMin,
		retryMax:    DefaultRetryDelayMax,
		pubsub:      true,
	}
}

// An Option changes a setting. Given to New it sets the Client's default;
// given to one call it overrides the default for that call only.
type Option func(*config)

// WithTTL sets how long the lock lives on each node: the lock is valid for
// this TTL minus the time the acquisition took and the clock drift. The
// default is 10s.
func WithTTL(d time.Duration) Option {
	return func(c *config) { c.ttl = d }
}

// WithDriftFactor sets the share of the TTL allowed for the clocks of the
// nodes to run fast. The drift subtracted from the validity is
// TTL × f + 2 ms. It must be in [0, 0.5); the default is 0.01.
func WithDriftFactor(f float64) Option {
	return func(c *config) { c.driftFactor = f }
}

// WithNodeTimeout bounds each request to one node. The default is derived from
// the TTL: a tenth of it, at least 2 ms and at most 100 ms. Zero restores the
// default. The library enforces it itself, so it holds even for go-redis
// clients built without ContextTimeoutEnabled.
func WithNodeTimeout(d time.Duration) Option {
	return func(c *config) {
		c.nodeTimeout = d
		c.nodeTimeoutSet = d != 0
	}
}

// WithRetryDelay sets the range of the random wait between two attempts of
// Lock. Each wait is drawn uniformly from [min, max], plus a draw from zero
// to the duration of the attempt that just failed; the jitter keeps
// competing clients from retrying in lockstep, even when attempts take
// longer than the range (a slow or loaded machine). The default is 10ms to
// 100ms.
func WithRetryDelay(min, max time.Duration) Option {
	return func(c *config) { c.retryMin, c.retryMax = min, max }
}

// WithKeyPrefix puts every lock key in a namespace: the Redis key becomes
// prefix+key. Lock.Key still returns the key as given. The default is no
// prefix, so keys are shared with other Redlock clients that use the same
// names.
func WithKeyPrefix(prefix string) Option {
	return func(c *config) { c.keyPrefix = prefix }
}

// releaseTimeout bounds each node's part in Unlock: the node timeout, or the
// TTL up to one second when that is longer.
func (c *config) releaseTimeout() time.Duration {
	return max(c.nodeTimeout, min(c.ttl, time.Second))
}

// acquireTTL is the TTL of an acquisition: the TTL, cut to the max hold.
func (c *config) acquireTTL() time.Duration {
	if c.maxHold > 0 && c.maxHold < c.ttl {
		return c.maxHold.Truncate(time.Millisecond)
	}
	return c.ttl
}

// WithPubSub chooses whether a waiting Lock listens for releases on Redis
// pub/sub, to retry the moment the holder unlocks, instead of only after its
// jittered retry delay. A Client keeps one subscription connection per node,
// shared by all its waiters. The default is on; turn it off where pub/sub is
// not allowed. Unlock always announces releases.
func WithPubSub(enabled bool) Option {
	return func(c *config) { c.pubsub = enabled }
}

// WithFencing hands out a fencing token with each lock: Lock.Fence returns a
// number that is larger than that of every earlier holder of the key, so that
// a store can reject the writes of a holder that lost the lock without
// knowing it (a process pause, a slow network). It costs one more round
// trip per acquisition, and a counter per key on each node that never
// expires; see docs/FENCING.md for the persistence it needs. The default is
// off.
func WithFencing(enabled bool) Option {
	return func(c *config) { c.fencing = enabled }
}

// WithReplicaAck makes a node's yes count only once the key has reached at
// least n of that node's replicas: each batch of acquires, extensions
// (auto-extension included) and fence write-backs to a node ends with a
// PUBLISH on a channel under the key (so that the WAIT also covers a copy
// of the request that go-redis sent on another connection, on Redis 7.2
// and later) and a WAIT n, on the same connection, bounded by the node
// timeout. A node whose
// replicas did not acknowledge in time votes failed, with ErrReplicaAck,
// and is rolled back like any node that failed. Use it when each node is a
// master with replicas that a failover may promote (Sentinel): replication
// is asynchronous, and a replica promoted before it received the key would
// let a second holder in. See docs/DEPLOYMENT.md.
//
// It costs the replicas' round trip on every acquisition, and a node
// without n connected, caught-up replicas never says yes. The default, 0,
// waits for none. It is refused with ErrInvalidOption for a negative n, and
// for Redis Cluster nodes (a *redis.ClusterClient), where WAIT would not
// reach the key's shard.
func WithReplicaAck(n int) Option {
	return func(c *config) { c.replicaAck = n }
}

// WithOwner makes the lock reentrant for an owner: a Lock call with an owner
// id that already holds the key succeeds at once, and adds one to a hold
// count kept on the nodes; each Unlock takes one away, and the key is
// released when none is left. Two processes that share the owner id share the
// lock. A different owner, or a plain lock, is blocked as usual. An owner
// lock is kept on each node as a hash, not the plain string of other locks.
// The default, "", is a plain lock.
func WithOwner(id string) Option {
	return func(c *config) { c.owner = id }
}

// WithLabel stores a short description of the holder with the lock: the
// host, the pid, the job. It goes inside the value each node keeps, after
// the token, so the key stays one plain string; Inspect and the CLI's
// status show it, and redis-cli GET shows it too. It must be valid UTF-8 of
// at most MaxLabelLen bytes, without control characters. The default is
// none.
func WithLabel(s string) Option {
	return func(c *config) { c.label = s }
}

// MaxLabelLen is the longest label WithLabel accepts, in bytes.
const MaxLabelLen = 128

// WithNodeGuard turns on the restart and clock-jump guard. With each
// acquisition it reads every node's run_id, uptime and clock (INFO server and
// TIME, pipelined with the acquire command: no extra round trip). A node that
// restarted less than the max TTL ago, or whose clock jumped by more than the
// drift allowance against our monotonic clock, is quarantined: its yes does
// not count, for acquisitions and extensions, until the max TTL has passed.
// This automates the delayed restart the Redlock spec asks of operators.
// Quarantines are logged at Warn and show in each vote's error.
//
// The default is off: it adds work to every acquisition, and nodes that
// persist with appendfsync always do not need its restart rule. Turn it on
// when nodes run without fsync, or their clocks are not trusted.
//
// The max TTL is the longest TTL the Client has sent to any node so far,
// whatever sent it: an acquisition (the Client's TTL or one call's WithTTL),
// Extend's WithTTL, or a renewal, for locks, semaphore permits and readers
// alike. It is raised before the request that carries the TTL goes out,
// since a request may land even when its call fails, so it covers the
// longest a key of any live hold of the Client may live. It is per Client:
// a Client that never sent a long TTL keeps a restarted node out only for
// its own, so Clients that share keys should use the same TTLs, Extend's
// included.
func WithNodeGuard(enabled bool) Option {
	return func(c *config) { c.guard = enabled }
}

// WithLogger sets where the Client logs: guard quarantines, lost locks and
// read-only nodes at Warn, failed rounds at Debug. Tokens are logged only at
// Debug. The default is silent. A panic in the logger's handler is
// recovered, and its record dropped: the library logs from its own
// goroutines (renewals, expiries, the nodes' senders). It is a Client
// setting: given to one call, it is an ErrInvalidOption.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

// WithObserver sets an Observer that receives every acquisition attempt,
// extension, loss and release of the Client's locks. The default is none.
// It is a Client setting: given to one call, it is an ErrInvalidOption.
func WithObserver(o Observer) Option {
	return func(c *config) { c.observer = o }
}

// withoutFenceWriteBack is a test-only switch that skips the fence
// write-back.
func withoutFenceWriteBack() Option {
	return func(c *config) { c.noFenceWriteBack = true }
}

// withTimerOnlyExpiry is a test-only switch: Done and Err leave the end of
// a lock past Until to the expiry timer. See config.timerOnlyExpiry.
func withTimerOnlyExpiry() Option {
	return func(c *config) { c.timerOnlyExpiry = true }
}

// withSharedValue is a test-only switch: every attempt of an acquisition
// writes the same value. See config.sharedValue.
func withSharedValue() Option {
	return func(c *config) { c.sharedValue = true }
}

// withUnsafeRetries is a test-only switch: acquire and release as if
// go-redis never sent a request twice. See config.unsafeRetries.
func withUnsafeRetries() Option {
	return func(c *config) { c.unsafeRetries = true }
}

// withMajoritySemaphore is a test-only switch: a semaphore uses the
// majority quorum of a lock, which is not enough. See
// config.majoritySemaphore.
func withMajoritySemaphore() Option {
	return func(c *config) { c.majoritySemaphore = true }
}

// apply returns base changed by opts, resolved and validated.
func (base config) apply(opts []Option) (config, error) {
	c := base
	if !c.nodeTimeoutSet {
		c.nodeTimeout = 0
	}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if !c.nodeTimeoutSet {
		c.nodeTimeout = defaultNodeTimeout(c.ttl)
	}
	return c, c.validate()
}

// minAutoExtendTTL is the shortest TTL whose renewals fit, for the config's
// node timeout and drift factor (the node timeout as chosen, or derived
// from each candidate TTL).
func minAutoExtendTTL(c *config) time.Duration {
	for ttl := time.Millisecond; ; ttl += ttl / 8 {
		nt := c.nodeTimeout
		if !c.nodeTimeoutSet {
			nt = defaultNodeTimeout(ttl)
		}
		if ttl/3+nt+clockDrift(ttl, c.driftFactor) < ttl {
			return ttl.Truncate(time.Millisecond) + time.Millisecond
		}
	}
}

// validate says what is wrong with a config, in terms of the options.
func (c *config) validate() error {
	switch {
	case c.ttl <= 0:
		return fmt.Errorf("%w: ttl must be positive, got %v", ErrInvalidOption, c.ttl)
	case math.IsNaN(c.driftFactor) || c.driftFactor < 0 || c.driftFactor >= 0.5:
		return fmt.Errorf("%w: drift factor must be in [0, 0.5), got %v", ErrInvalidOption, c.driftFactor)
	case c.nodeTimeout < 0:
		return fmt.Errorf("%w: node timeout must not be negative, got %v", ErrInvalidOption, c.nodeTimeout)
	case c.retryMin < 0 || c.retryMax < c.retryMin || c.retryMax <= 0:
		return fmt.Errorf("%w: retry delay must satisfy 0 <= min <= max and max > 0, got min %v, max %v",
			ErrInvalidOption, c.retryMin, c.retryMax)
	case c.maxHold < 0:
		return fmt.Errorf("%w: max hold must not be negative, got %v", ErrInvalidOption, c.maxHold)
	case c.replicaAck < 0:
		return fmt.Errorf("%w: WithReplicaAck: the number of replicas must not be negative, got %d", ErrInvalidOption, c.replicaAck)
	case len(c.label) > MaxLabelLen:
		return fmt.Errorf("%w: label is %d bytes, longer than the %d allowed", ErrInvalidOption, len(c.label), MaxLabelLen)
	case !utf8.ValidString(c.label):
		return fmt.Errorf("%w: label %q is not valid UTF-8", ErrInvalidOption, c.label)
	case strings.IndexFunc(c.label, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: label %q contains a control character", ErrInvalidOption, c.label)
	}
	if c.maxHold > 0 {
		if d := clockDrift(c.maxHold, c.driftFactor); validity(c.maxHold, c.nodeTimeout, d) <= 0 {
			return fmt.Errorf("%w: max hold %v leaves no validity after clock drift %v and node timeout %v",
				ErrInvalidOption, c.maxHold, d, c.nodeTimeout)
		}
	}
	if c.ttl.Milliseconds() < 1 {
		return fmt.Errorf("%w: ttl must be at least 1ms (Redis counts in milliseconds), got %v", ErrInvalidOption, c.ttl)
	}
	drift := clockDrift(c.ttl, c.driftFactor)
	if validity(c.ttl, c.nodeTimeout, drift) <= 0 {
		return fmt.Errorf("%w: ttl %v leaves no validity after clock drift %v and node timeout %v",
			ErrInvalidOption, c.ttl, drift, c.nodeTimeout)
	}
	if c.autoExtend {
		// The first renewal starts a third of the TTL in, and must be
		// able to reach its quorum within a node timeout before the
		// validity ends.
		if c.ttl/3+c.nodeTimeout+drift >= c.ttl {
			return fmt.Errorf("%w: auto-extension cannot work at ttl %v: a renewal starts at a third of the TTL (%v) and may "+
				"take the node timeout (%v) to reach its quorum, past the validity (clock drift %v); "+
				"use a TTL of at least %v", ErrInvalidOption, c.ttl, c.ttl/3, c.nodeTimeout, drift, minAutoExtendTTL(c))
		}
	}
	return nil
}
