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

	// replicaAck is the number of replicas that must acknowledge a write
	// before a node's yes counts (WithReplicaAck); 0 waits for none.
	replicaAck int
	// fsyncAck makes a node's yes count only once WAITAOF confirmed the
	// write is fsynced there (WithFsyncAck). New only.
	fsyncAck bool

	// topUp asks the nodes that did not vote yes to take the key with each
	// extension and renewal (WithTopUp).
	topUp bool
	// lockDelay is added to the TTL the nodes keep a key for, not to the
	// validity (WithLockDelay).
	lockDelay time.Duration
	// minHold is the shortest time an Unlock lets the key go after the
	// acquisition (WithMinHold).
	minHold time.Duration
	// fair queues the lock's waiters by ticket (WithFair).
	fair bool
	// queuePlace is told a fair call's place in the queue
	// (WithQueuePlace).
	queuePlace func(place int)

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
		topUp:       true,
	}
}

// A ClientOption sets one of a Client's settings. New takes it. The options
// that only New takes are ClientOptions alone: WithDriftFactor,
// WithNodeTimeout, WithKeyPrefix, WithPubSub, WithReplicaAck,
// WithFsyncAck, WithNodeGuard, WithLogger and WithObserver. Every LockOption is also a
// ClientOption, so that New can set its default.
type ClientOption interface {
	applyClient(*config)
}

// A LockOption sets one setting of a lock. Given to a lock call (Lock,
// TryLock, LockMulti, TryLockMulti, RLock, TryRLock, Do, RDo, Semaphore,
// Acquire, TryAcquire) it holds for that call; given to New it is the
// default of every call. WithTTL, WithRetryDelay, WithAutoExtend,
// WithMaxHold, WithFencing, WithOwner, WithLabel, WithTopUp,
// WithLockDelay and WithMinHold are LockOptions.
type LockOption interface {
	ClientOption
	applyLock(*config)
}

// An ExtendOption sets one setting of Lock.Extend. WithTTL is the only one.
type ExtendOption interface {
	applyExtend(*extendConfig)
}

// A TTLOption is usable in all three places: in New, in a lock call, and
// in Extend. WithTTL returns one.
type TTLOption interface {
	LockOption
	ExtendOption
}

// Option is the type of the options New takes.
//
// Deprecated: Option is an alias of ClientOption, kept so that code that
// builds option lists for New compiles. Use ClientOption, or LockOption for
// the options of one call.
type Option = ClientOption

// clientOnly is a setting that only New takes.
type clientOnly func(*config)

func (f clientOnly) applyClient(c *config) { f(c) }

// lockSetting is a setting of a lock, that New takes as the default.
type lockSetting func(*config)

func (f lockSetting) applyClient(c *config) { f(c) }
func (f lockSetting) applyLock(c *config)   { f(c) }

// extendConfig holds the settings of one Extend call.
type extendConfig struct {
	ttl    time.Duration
	ttlSet bool // false: the lock's TTL
}

// ttlSetting is WithTTL's option.
type ttlSetting time.Duration

func (d ttlSetting) applyClient(c *config)       { c.ttl = time.Duration(d) }
func (d ttlSetting) applyLock(c *config)         { c.ttl = time.Duration(d) }
func (d ttlSetting) applyExtend(e *extendConfig) { e.ttl, e.ttlSet = time.Duration(d), true }

// WithTTL sets how long the lock lives on each node: the lock is valid for
// this TTL minus the time the acquisition took and the clock drift. The
// default is 10s.
func WithTTL(d time.Duration) TTLOption {
	return ttlSetting(d)
}

// WithDriftFactor sets the share of the TTL allowed for the clocks of the
// nodes to run fast. The drift subtracted from the validity is
// TTL × f + 2 ms. It must be in [0, 0.5); the default is 0.01.
func WithDriftFactor(f float64) ClientOption {
	return clientOnly(func(c *config) { c.driftFactor = f })
}

// WithNodeTimeout bounds each request to one node. The default is derived from
// the TTL: a tenth of it, at least 2 ms and at most 100 ms. Zero restores the
// default. The library enforces it itself, so it holds even for go-redis
// clients built without ContextTimeoutEnabled.
func WithNodeTimeout(d time.Duration) ClientOption {
	return clientOnly(func(c *config) {
		c.nodeTimeout = d
		c.nodeTimeoutSet = d != 0
	})
}

// WithRetryDelay sets the range of the random wait between two attempts of
// Lock. Each wait is drawn uniformly from [min, max], plus a draw from zero
// to the duration of the attempt that just failed; the jitter keeps
// competing clients from retrying in lockstep, even when attempts take
// longer than the range (a slow or loaded machine). The default is 10ms to
// 100ms.
func WithRetryDelay(min, max time.Duration) LockOption {
	return lockSetting(func(c *config) { c.retryMin, c.retryMax = min, max })
}

// WithKeyPrefix puts every lock key in a namespace: the Redis key becomes
// prefix+key. Lock.Key still returns the key as given. The default is no
// prefix, so keys are shared with other Redlock clients that use the same
// names.
func WithKeyPrefix(prefix string) ClientOption {
	return clientOnly(func(c *config) { c.keyPrefix = prefix })
}

// releaseTimeout bounds each node's part in Unlock: the node timeout, or the
// TTL up to one second when that is longer.
func (c *config) releaseTimeout() time.Duration {
	return max(c.nodeTimeout, min(c.ttl, time.Second))
}

// nodeTTL is how long the nodes keep a key sent with TTL ttl: the TTL plus
// the lock-delay (WithLockDelay). The validity is still counted from ttl.
func (c *config) nodeTTL(ttl time.Duration) time.Duration { return ttl + c.lockDelay }

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
func WithPubSub(enabled bool) ClientOption {
	return clientOnly(func(c *config) { c.pubsub = enabled })
}

// WithFencing hands out a fencing token with each lock: Lock.Fence returns a
// number that is larger than that of every earlier holder of the key, so that
// a store can reject the writes of a holder that lost the lock without
// knowing it (a process pause, a slow network). It costs one more round
// trip per acquisition, and a counter per key on each node that never
// expires; see docs/FENCING.md for the persistence it needs. The default is
// off.
func WithFencing(enabled bool) LockOption {
	return lockSetting(func(c *config) { c.fencing = enabled })
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
func WithReplicaAck(n int) ClientOption {
	return clientOnly(func(c *config) { c.replicaAck = n })
}

// WithOwner makes the lock reentrant for an owner: a Lock call with an owner
// id that already holds the key succeeds at once, and adds one to a hold
// count kept on the nodes; each Unlock takes one away, and the key is
// released when none is left. Two processes that share the owner id share the
// lock. A different owner, or a plain lock, is blocked as usual. An owner
// lock is kept on each node as a hash, not the plain string of other locks.
// The default, "", is a plain lock.
func WithOwner(id string) LockOption {
	return lockSetting(func(c *config) { c.owner = id })
}

// WithLabel stores a short description of the holder with the lock: the
// host, the pid, the job. It goes inside the value each node keeps, after
// the token, so the key stays one plain string; Inspect and the CLI's
// status show it, and redis-cli GET shows it too. It must be valid UTF-8 of
// at most MaxLabelLen bytes, without control characters. The default is
// none.
func WithLabel(s string) LockOption {
	return lockSetting(func(c *config) { c.label = s })
}

// WithAutoExtend keeps a lock alive while it is held: a renewal runs every
// third of the TTL, needs a quorum within the validity, and is retried fast
// while validity lasts. When the lock is lost anyway, Done closes and Err
// says why. Unlock stops the renewals before it releases. A Client batches
// the renewals of all its locks into one pipeline per node per tick. The
// default is off.
func WithAutoExtend(enabled bool) LockOption {
	return lockSetting(func(c *config) { c.autoExtend = enabled })
}

// WithMaxHold caps the total time a lock can be held, renewals and Extend
// included, as the Redlock spec asks: the lock's Until never goes past its
// acquisition plus d, and it then ends with an Err that wraps ErrLockLost and
// ErrMaxHold. Zero, the default, means no cap.
func WithMaxHold(d time.Duration) LockOption {
	return lockSetting(func(c *config) { c.maxHold = d })
}

// WithTopUp chooses whether each extension that wins, Extend's and
// auto-extension's alike, is followed by asking the nodes that never voted
// yes to take the key, with SET NX of the holder's own value, so that a
// lock won on exactly a quorum grows to every node that is free. A node
// that joins counts from then on (in Stats from the next round, and in
// Inspect), and keeps the lock when one of the original quorum forgets it
// (an empty restart, a clock step, an eviction): without it, that one loss
// lets a second client in. Top-up asks only right after a quorum confirmed
// the lock, and never re-creates the key on a node that held it and lost
// it. It applies to exclusive locks, plain, fenced, multi-key and owner
// locks; readers and semaphore permits are not topped up. The default is
// on.
func WithTopUp(enabled bool) LockOption {
	return lockSetting(func(c *config) { c.topUp = enabled })
}

// WithLockDelay keeps a lock's keys on the nodes for d longer than its TTL,
// while its validity stays the TTL minus the elapsed time and the drift: a
// lock that expired or was lost (its holder paused, or cut off) keeps others
// out until d after its end, so that a holder that does not know it lost the
// lock has d to notice before anyone else acts. Unlock of a lock that is
// still valid frees it at once; Unlock of one whose validity has ended
// leaves the keys to their delay, and returns an error that matches
// ErrNotHeld. It is Chubby's and Consul's lock-delay.
//
// Every TTL sent for the hold is TTL+d: the acquisition's, Extend's,
// auto-extension's and top-up's, so a lock that is kept alive is kept d
// past its last extension. It applies to plain, multi-key and fenced
// locks, readers and semaphore permits; owner locks (WithOwner) refuse it
// with ErrInvalidOption, since the owner re-enters a delayed key at once
// and the stale hold would keep the key past the next clean Unlock. With
// WithMaxHold, the validity still ends at the cap, and the keys live up to
// d past it. With WithNodeGuard, the max TTL counts TTL+d. Client.Release
// frees the keys at once all the same.
//
// The default, 0, adds none; a negative d is refused with ErrInvalidOption.
func WithLockDelay(d time.Duration) LockOption {
	return lockSetting(func(c *config) { c.lockDelay = d })
}

// WithMinHold makes a lock last at least d from its acquisition: an Unlock
// before the acquisition plus d leaves the keys to expire then, rather than
// delete them; an Unlock after that frees them at once. It keeps a job that
// finished fast from running again on a host whose clock or schedule is a
// little off (ShedLock's lockAtLeastFor).
//
// The release before acquisition+d sets the keys' expiry, on each node that
// still holds the lock's value, to the time left until then, measured on
// the local monotonic clock as the request goes out; it announces nothing,
// and Unlock still returns nil when a quorum held the lock. d may be longer
// than the TTL, with auto-extension: the release then lengthens the keys to
// acquisition+d. A lock that Close released before it was handed out, and
// Client.Release, free the keys at once. With WithNodeGuard, the max TTL
// counts d. An extension already on its way when Unlock runs may land after
// the release and lengthen the keys again, by up to one TTL.
//
// It applies to plain, multi-key and fenced locks; owner locks, RLock and
// semaphores refuse it with ErrInvalidOption (an owner's other holds would
// release the key before the minimum hold ends). The default, 0, is none; a
// negative d, or one longer than WithMaxHold's cap, is refused with
// ErrInvalidOption.
func WithMinHold(d time.Duration) LockOption {
	return lockSetting(func(c *config) { c.minHold = d })
}

// WithFair makes Lock calls on one key take the lock in the order in which
// they began to wait, across Clients and processes: each waiting call draws
// a ticket from a counter that a quorum of nodes keeps increasing (as the
// fence counter, see docs/FAIRNESS.md), joins a queue on every node, and
// each node says yes only to the first live entry of its queue. A waiter
// whose ctx ends leaves the queue at once; one that crashed holds up those
// behind it for at most one TTL. TryLock with it takes the key only when no
// fair call waits for it, and never joins the queue.
//
// A fair lock is a plain lock on the nodes: it excludes plain locks of the
// same key (and redsync's), and they exclude it. Fairness holds among the
// fair calls: a plain call that finds the key free may take it ahead of
// the queue. It applies to plain locks of one key, fenced or not; multi-key
// locks, owner locks, RLock and semaphores refuse it with ErrInvalidOption.
// The default is false.
func WithFair(fair bool) LockOption {
	return lockSetting(func(c *config) { c.fair = fair })
}

// WithQueuePlace makes a fair Lock call (WithFair) tell fn its place in
// the key's queue, 1 for the next to take the lock: after each attempt
// that a quorum of nodes answered with a place different from the last one
// fn was told. It is called on the goroutine that called Lock, before the
// next attempt, and must return quickly. The place is the quorum-th
// smallest of the nodes' own places, so a quorum of nodes has at most
// place-1 calls ahead of this one. Without WithFair it is refused with
// ErrInvalidOption.
func WithQueuePlace(fn func(place int)) LockOption {
	return lockSetting(func(c *config) { c.queuePlace = fn })
}

// WithFsyncAck makes a node's yes count only once the node confirmed that
// it fsynced the key to its append-only file: each batch of acquires,
// extensions (auto-extension included) and fence write-backs to a node ends
// with a barrier PUBLISH and WAITAOF 1 0 on the same connection, bounded by
// half the node timeout (a quarter with WithReplicaAck, whose WAIT takes
// another: a yes then needs both acknowledgements). A node that did not
// confirm in time votes failed, with ErrFsyncAck, and is rolled back like
// any node that failed. Releases do not wait. With it, a node that crashes
// right after it voted and restarts from its AOF still holds the key: the
// restart rule of the Redlock spec is no longer needed for safety.
//
// Every node must have WAITAOF (Redis 7.2 or later, Valkey 7.2 or later) and
// run with appendonly yes and appendfsync always, which confirms at once.
// With appendfsync no WAITAOF never confirms; with everysec it waits for the
// next fsync, up to a second, which a short node timeout turns into failed
// votes, and some servers (Valkey 8.0.1 among them) confirm it before the
// fsync. Check reports each of these. A node without WAITAOF, or with
// appendonly off, votes failed with an ErrFsyncAck that says so, which is
// also logged at Warn once per node. It is refused with ErrInvalidOption for
// Redis Cluster nodes, as WithReplicaAck is. The default is off.
func WithFsyncAck(enabled bool) ClientOption {
	return clientOnly(func(c *config) { c.fsyncAck = enabled })
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
func WithNodeGuard(enabled bool) ClientOption {
	return clientOnly(func(c *config) { c.guard = enabled })
}

// WithLogger sets where the Client logs: guard quarantines, lost locks,
// read-only nodes, and node errors that retrying will not fix (a refused
// password or DB, a host name that does not resolve, an ACL user without a
// command the library needs, a node without WAITAOF or with appendonly off
// under WithFsyncAck) at Warn, the last once per node and kind as
// soon as it is seen; failed rounds at Debug. Tokens are logged only at
// Debug. The default is silent. A panic in the logger's handler is
// recovered, and its record dropped: the library logs from its own
// goroutines (renewals, expiries, the nodes' senders). It is a Client
// setting: only New takes it.
func WithLogger(l *slog.Logger) ClientOption {
	return clientOnly(func(c *config) { c.logger = l })
}

// WithObserver sets an Observer that receives every acquisition attempt,
// extension, loss and release of the Client's locks. The default is none.
// It is a Client setting: only New takes it.
func WithObserver(o Observer) ClientOption {
	return clientOnly(func(c *config) { c.observer = o })
}

// applyClient returns base changed by New's opts, resolved and validated.
func (base config) applyClient(opts []ClientOption) (config, error) {
	c := base
	for _, o := range opts {
		if o != nil {
			o.applyClient(&c)
		}
	}
	return c.resolve()
}

// applyLock returns base, a Client's config, changed by one call's opts,
// resolved and validated.
func (base config) applyLock(opts []LockOption) (config, error) {
	c := base
	if !c.nodeTimeoutSet {
		c.nodeTimeout = 0
	}
	for _, o := range opts {
		if o != nil {
			o.applyLock(&c)
		}
	}
	return c.resolve()
}

// resolve derives the node timeout from the TTL, unless it was chosen, and
// validates the result.
func (c config) resolve() (config, error) {
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
	case c.lockDelay < 0:
		return fmt.Errorf("%w: WithLockDelay: the delay must not be negative, got %v", ErrInvalidOption, c.lockDelay)
	case c.minHold < 0:
		return fmt.Errorf("%w: WithMinHold: the minimum hold must not be negative, got %v", ErrInvalidOption, c.minHold)
	case c.maxHold > 0 && c.minHold > c.maxHold:
		return fmt.Errorf("%w: WithMinHold: the minimum hold %v is longer than the max hold %v", ErrInvalidOption, c.minHold, c.maxHold)
	case c.queuePlace != nil && !c.fair:
		return fmt.Errorf("%w: WithQueuePlace needs WithFair(true): only a fair lock has a queue", ErrInvalidOption)
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
