package redlockotel_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/redlockgo/redlock"
	redlockotel "github.com/redlockgo/redlock/contrib/otel"
)

// --- helpers -------------------------------------------------------------

// newObserver returns an Observer on a fresh MeterProvider and the reader
// that collects from it.
func newObserver(t *testing.T, opts ...redlockotel.Option) (*redlockotel.Observer, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	obs, err := redlockotel.New(mp, opts...)
	require.NoError(t, err)
	return obs, reader
}

// metrics is one collection, by instrument name.
type metrics map[string]metricdata.Aggregation

func collect(t *testing.T, r *sdkmetric.ManualReader) metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(t.Context(), &rm))
	out := metrics{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, "github.com/redlockgo/redlock/contrib/otel", sm.Scope.Name, "got scope %q", sm.Scope.Name)
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// has reports whether set holds every attribute of want.
func has(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// count sums the counter name over the data points that carry want.
func (m metrics) count(t *testing.T, name string, want ...attribute.KeyValue) int64 {
	t.Helper()
	data, ok := m[name]
	if !ok {
		return 0
	}
	sum, ok := data.(metricdata.Sum[int64])
	require.True(t, ok, "%s: got %T, want an int64 sum", name, data)
	require.True(t, sum.IsMonotonic, "%s: got a non-monotonic sum, want a counter", name)
	var n int64
	for _, dp := range sum.DataPoints {
		if has(dp.Attributes, want) {
			n += dp.Value
		}
	}
	return n
}

// histogram sums the histogram name's counts and sums over the data points
// that carry want.
func (m metrics) histogram(t *testing.T, name string, want ...attribute.KeyValue) (count uint64, sum float64) {
	t.Helper()
	data, ok := m[name]
	if !ok {
		return 0, 0
	}
	h, ok := data.(metricdata.Histogram[float64])
	require.True(t, ok, "%s: got %T, want a float64 histogram", name, data)
	for _, dp := range h.DataPoints {
		if has(dp.Attributes, want) {
			count += dp.Count
			sum += dp.Sum
		}
	}
	return count, sum
}

// attrSets returns the attribute sets of every data point of every
// instrument.
func (m metrics) attrSets() map[string][]attribute.Set {
	out := map[string][]attribute.Set{}
	for name, data := range m {
		switch d := data.(type) {
		case metricdata.Sum[int64]:
			for _, dp := range d.DataPoints {
				out[name] = append(out[name], dp.Attributes)
			}
		case metricdata.Histogram[float64]:
			for _, dp := range d.DataPoints {
				out[name] = append(out[name], dp.Attributes)
			}
		}
	}
	return out
}

func outcome(s string) attribute.KeyValue { return attribute.String("outcome", s) }
func vote(s string) attribute.KeyValue    { return attribute.String("vote", s) }
func op(s string) attribute.KeyValue      { return attribute.String("op", s) }
func node(i int) attribute.KeyValue       { return attribute.Int("node", i) }

// answered builds the Stats of a round where node i voted votes[i] and
// answered after 1 ms.
func answered(op, key string, votes ...redlock.Vote) redlock.Stats {
	s := redlock.Stats{Op: op, Key: key, Quorum: len(votes)/2 + 1, Elapsed: 4 * time.Millisecond}
	for i, v := range votes {
		s.Nodes = append(s.Nodes, redlock.NodeVote{Index: i, Addr: fmt.Sprintf("10.0.0.%d:6379", i), Vote: v, Latency: time.Millisecond})
		switch v {
		case redlock.VoteYes:
			s.Yes++
		case redlock.VoteNo:
			s.No++
		case redlock.VoteFailed:
			s.Failed++
		case redlock.VoteNotWaited:
			s.NotWaited++
		}
	}
	if op != redlock.OpUnlock {
		s.Validity = 10*time.Second - s.Elapsed - 102*time.Millisecond
	}
	return s
}

// nodes starts n miniredis servers and a connected go-redis client for each.
func nodes(t *testing.T, n int) ([]*miniredis.Miniredis, []redis.UniversalClient) {
	t.Helper()
	ms := make([]*miniredis.Miniredis, n)
	cs := make([]redis.UniversalClient, n)
	for i := range n {
		ms[i] = miniredis.RunT(t)
		cs[i] = dial(t, ms[i].Addr())
		// Connect now, so that dialing does not count against the first
		// round's node timeout.
		require.NoError(t, cs[i].Ping(t.Context()).Err())
	}
	return ms, cs
}

// dial returns a go-redis client for addr. Its requests end with their ctx,
// so that Client.Close does not wait on a blackhole for go-redis's own
// read timeout.
func dial(t *testing.T, addr string) redis.UniversalClient {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rc.Close() })
	return rc
}

func newClient(t *testing.T, cs []redis.UniversalClient, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	c, err := redlock.New(cs, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// blackhole returns the address of a server that accepts connections and
// never answers, as a hung Redis would.
func blackhole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu    sync.Mutex // guards conns
		conns []net.Conn
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// --- construction --------------------------------------------------------

func TestNewRejectsBadOptions(t *testing.T) {
	mp := sdkmetric.NewMeterProvider()
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	cases := []struct {
		name string
		mp   *sdkmetric.MeterProvider
		opts []redlockotel.Option
		want string
	}{
		{"nil provider", nil, nil, "nil MeterProvider"},
		{"reserved key", mp, []redlockotel.Option{redlockotel.WithAttributes(attribute.String("outcome", "x"))}, `attribute "outcome" is set by the observer`},
		{"empty key", mp, []redlockotel.Option{redlockotel.WithAttributes(attribute.String("", "eu"))}, "attribute with an empty key"},
		{"no value", mp, []redlockotel.Option{redlockotel.WithAttributes(attribute.KeyValue{Key: "cluster"})}, `attribute "cluster" has no value`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.mp == nil {
				_, err = redlockotel.New(nil, tc.opts...)
			} else {
				_, err = redlockotel.New(tc.mp, tc.opts...)
			}
			require.ErrorIs(t, err, redlockotel.ErrInvalidOption, "got %v, want ErrInvalidOption", err)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// --- synthetic Stats -----------------------------------------------------

func TestAttemptedRecordsOutcomeDurationValidityAndVotes(t *testing.T) {
	obs, reader := newObserver(t)
	y, n, f := redlock.VoteYes, redlock.VoteNo, redlock.VoteFailed

	won := answered(redlock.OpLock, "attempted", y, y, y, n, redlock.VoteNotWaited)
	won.Nodes[4].Latency = 0 // not answered before the quorum was reached
	obs.Attempted(won, nil)

	taken := answered(redlock.OpLock, "attempted", n, n, n, y, f)
	obs.Attempted(taken, fmt.Errorf("%w: taken", redlock.ErrNotAcquired))

	gone := answered(redlock.OpLock, "attempted", y, f, f, f, f)
	obs.Attempted(gone, errors.Join(redlock.ErrNotAcquired, context.Canceled))

	m := collect(t, reader)
	for _, tc := range []struct {
		outcome string
		want    int64
	}{{"acquired", 1}, {"not_acquired", 1}, {"cancelled", 1}} {
		got := m.count(t, "redlock.attempts", outcome(tc.outcome))
		require.Equal(t, tc.want, got, "attempts{outcome=%s}: got %d, want %d", tc.outcome, got, tc.want)
	}
	count, sum := m.histogram(t, "redlock.attempt.duration")
	require.Equal(t, uint64(3), count, "attempt.duration count: got %d, want 3", count)
	require.InDelta(t, 0.012, sum, 1e-9, "attempt.duration sum: got %v, want 0.012", sum)
	count, _ = m.histogram(t, "redlock.attempt.duration", outcome("acquired"))
	require.Equal(t, uint64(1), count, "attempt.duration{acquired} count: got %d, want 1", count)

	count, sum = m.histogram(t, "redlock.validity")
	require.Equal(t, uint64(1), count, "validity count: got %d, want 1 (won attempts only)", count)
	require.InDelta(t, won.Validity.Seconds(), sum, 1e-9, "validity sum: got %v, want %v", sum, won.Validity.Seconds())

	for _, tc := range []struct {
		vote string
		want int64
	}{{"yes", 3 + 1 + 1}, {"no", 1 + 3}, {"failed", 1 + 4}, {"unanswered", 1}} {
		got := m.count(t, "redlock.node.votes", op("lock"), vote(tc.vote))
		require.Equal(t, tc.want, got, "votes{vote=%s}: got %d, want %d", tc.vote, got, tc.want)
	}
	got := m.count(t, "redlock.node.votes", node(4), attribute.String("addr", "10.0.0.4:6379"), vote("unanswered"))
	require.Equal(t, int64(1), got, "votes{node=4,vote=unanswered}: got %d, want 1", got)
	got = m.count(t, "redlock.node.votes", node(0))
	require.Equal(t, int64(3), got, "votes{node=0}: got %d, want 3 (one per round)", got)
}

// A node that fails with its own DeadlineExceeded does not make the attempt
// cancelled: only the caller's ctx does.
func TestOutcomeCancelledOnlyForTheCallersContext(t *testing.T) {
	nodeTimeout := &redlock.NodeError{Index: 2, Addr: "10.0.0.2:6379", Err: context.DeadlineExceeded}
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"won", nil, "acquired"},
		{"taken", redlock.ErrNotAcquired, "not_acquired"},
		{"node deadline", fmt.Errorf("%w: %w", redlock.ErrNotAcquired, nodeTimeout), "not_acquired"},
		{"node deadline joined", errors.Join(redlock.ErrNotAcquired, nodeTimeout), "not_acquired"},
		{"caller cancelled", errors.Join(redlock.ErrNotAcquired, nodeTimeout, context.Canceled), "cancelled"},
		{"caller deadline", fmt.Errorf("%w: %w", redlock.ErrNotAcquired, context.DeadlineExceeded), "cancelled"},
		{"cause", fmt.Errorf("%w: %w", redlock.ErrNotAcquired, context.Cause(canceledWithCause())), "cancelled"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obs, reader := newObserver(t)
			obs.Attempted(answered(redlock.OpLock, "cancel", redlock.VoteYes), tc.err)
			got := collect(t, reader).count(t, "redlock.attempts", outcome(tc.want))
			require.Equal(t, int64(1), got, "attempts{outcome=%s} for %v: got %d, want 1", tc.want, tc.err, got)
		})
	}
}

// canceledWithCause returns a ctx cancelled with a cause that wraps
// context.Canceled.
func canceledWithCause() context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(fmt.Errorf("shutting down: %w", context.Canceled))
	return ctx
}

func TestExtendedAndReleased(t *testing.T) {
	obs, reader := newObserver(t)
	y, n := redlock.VoteYes, redlock.VoteNo

	obs.Extended(answered(redlock.OpExtend, "ext", y, y, y, n, n), nil)
	obs.Extended(answered(redlock.OpExtend, "ext", n, n, n, y, y), fmt.Errorf("%w: gone", redlock.ErrNotHeld))
	// Auto-extension reports counts only.
	obs.Extended(redlock.Stats{Op: redlock.OpExtend, Key: "ext", Quorum: 3, Yes: 5, Elapsed: time.Millisecond}, nil)
	obs.Extended(redlock.Stats{Op: redlock.OpExtend, Key: "ext", Quorum: 3, Yes: 1}, errors.Join(redlock.ErrNotHeld, context.DeadlineExceeded))

	obs.Released(answered(redlock.OpUnlock, "ext", y, y, y, y, y), nil)
	obs.Released(answered(redlock.OpUnlock, "ext", y, n, n, n, n), redlock.ErrNotHeld)

	m := collect(t, reader)
	for _, tc := range []struct {
		name, outcome string
		want          int64
	}{
		{"redlock.extensions", "extended", 2},
		{"redlock.extensions", "not_extended", 1},
		{"redlock.extensions", "cancelled", 1},
		{"redlock.releases", "released", 1},
		{"redlock.releases", "not_released", 1},
		{"redlock.releases", "cancelled", 0},
	} {
		got := m.count(t, tc.name, outcome(tc.outcome))
		require.Equal(t, tc.want, got, "%s{outcome=%s}: got %d, want %d", tc.name, tc.outcome, got, tc.want)
	}
	got := m.count(t, "redlock.node.votes", op("extend"))
	require.Equal(t, int64(10), got, "votes{op=extend}: got %d, want 10 (auto-extension has no per-node votes)", got)
	got = m.count(t, "redlock.node.votes", op("unlock"), vote("yes"))
	require.Equal(t, int64(6), got, "votes{op=unlock,vote=yes}: got %d, want 6", got)
	count, _ := m.histogram(t, "redlock.attempt.duration")
	require.Zero(t, count, "attempt.duration count: got %d, want 0 (no attempt)", count)
}

func TestLostReasons(t *testing.T) {
	obs, reader := newObserver(t)
	obs.Lost("lost", fmt.Errorf("%w: %w", redlock.ErrLockLost, errors.New("validity ended before a renewal succeeded")))
	obs.Lost("lost", fmt.Errorf("%w: %w", redlock.ErrLockLost, redlock.ErrMaxHold))
	obs.Lost("lost", fmt.Errorf("%w: %w", redlock.ErrLockLost, fmt.Errorf("%w: token gone", redlock.ErrNotHeld)))
	obs.Lost("lost", fmt.Errorf("%w: %w", redlock.ErrLockLost, errors.New("validity ended")))

	m := collect(t, reader)
	for _, tc := range []struct {
		reason string
		want   int64
	}{{"expired", 2}, {"max_hold", 1}, {"not_held", 1}} {
		got := m.count(t, "redlock.losses", attribute.String("reason", tc.reason))
		require.Equal(t, tc.want, got, "losses{reason=%s}: got %d, want %d", tc.reason, got, tc.want)
	}
}

func TestAttributes(t *testing.T) {
	drive := func(obs *redlockotel.Observer) {
		s := answered(redlock.OpLock, "orders:42", redlock.VoteYes, redlock.VoteYes, redlock.VoteYes)
		obs.Attempted(s, nil)
		obs.Extended(answered(redlock.OpExtend, "orders:42", redlock.VoteYes), nil)
		obs.Released(answered(redlock.OpUnlock, "orders:42", redlock.VoteYes), nil)
		obs.Lost("orders:42", redlock.ErrLockLost)
	}
	instruments := []string{
		"redlock.attempts", "redlock.attempt.duration", "redlock.validity", "redlock.node.votes",
		"redlock.extensions", "redlock.releases", "redlock.losses",
	}

	t.Run("default has no key", func(t *testing.T) {
		obs, reader := newObserver(t, redlockotel.WithAttributes(attribute.String("cluster", "eu")))
		drive(obs)
		sets := collect(t, reader).attrSets()
		for _, name := range instruments {
			require.NotEmpty(t, sets[name], "%s: got no data points, want some", name)
			for _, set := range sets[name] {
				_, ok := set.Value("key")
				require.False(t, ok, "%s: got a key attribute in %v, want none", name, set.Encoded(attribute.DefaultEncoder()))
				v, _ := set.Value("cluster")
				require.Equal(t, "eu", v.String(), "%s: got cluster %q, want eu", name, v.String())
			}
		}
	})
	t.Run("WithKeyAttribute", func(t *testing.T) {
		obs, reader := newObserver(t, redlockotel.WithKeyAttribute(true))
		drive(obs)
		sets := collect(t, reader).attrSets()
		for _, name := range instruments {
			require.NotEmpty(t, sets[name], "%s: got no data points, want some", name)
			for _, set := range sets[name] {
				v, _ := set.Value("key")
				require.Equal(t, "orders:42", v.String(), "%s: got key %q, want orders:42", name, v.String())
			}
		}
	})
}

func TestObserverIsSafeForConcurrentUse(t *testing.T) {
	obs, reader := newObserver(t)
	const goroutines, each = 16, 200
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			key := fmt.Sprintf("concurrent-%d", g)
			for range each {
				obs.Attempted(answered(redlock.OpLock, key, redlock.VoteYes, redlock.VoteYes, redlock.VoteNo), nil)
				obs.Extended(answered(redlock.OpExtend, key, redlock.VoteYes, redlock.VoteYes, redlock.VoteNo), nil)
				obs.Released(answered(redlock.OpUnlock, key, redlock.VoteYes, redlock.VoteYes, redlock.VoteNo), nil)
				obs.Lost(key, redlock.ErrLockLost)
			}
		})
	}
	// Collect while recording, to race the reader against the writers.
	_ = collect(t, reader)
	wg.Wait()

	m := collect(t, reader)
	const n = goroutines * each
	for _, name := range []string{"redlock.attempts", "redlock.extensions", "redlock.releases", "redlock.losses"} {
		got := m.count(t, name)
		require.Equal(t, int64(n), got, "%s: got %d, want %d", name, got, n)
	}
	got := m.count(t, "redlock.node.votes")
	require.Equal(t, int64(3*3*n), got, "votes: got %d, want %d", got, 3*3*n)
}

// --- end to end, with a redlock.Client -----------------------------------

func TestEndToEndLockExtendUnlock(t *testing.T) {
	obs, reader := newObserver(t)
	ms, cs := nodes(t, 5)
	c := newClient(t, cs, redlock.WithObserver(obs))

	l, err := c.TryLock(t.Context(), "e2e")
	require.NoError(t, err)
	_, err = c.TryLock(t.Context(), "e2e")
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "second TryLock: got %v, want ErrNotAcquired", err)
	require.NoError(t, l.Extend(t.Context()))
	require.NoError(t, l.Unlock(t.Context()))

	m := collect(t, reader)
	for _, tc := range []struct {
		name, outcome string
		want          int64
	}{
		{"redlock.attempts", "acquired", 1},
		{"redlock.attempts", "not_acquired", 1},
		{"redlock.attempts", "cancelled", 0},
		{"redlock.extensions", "extended", 1},
		{"redlock.releases", "released", 1},
	} {
		got := m.count(t, tc.name, outcome(tc.outcome))
		require.Equal(t, tc.want, got, "%s{outcome=%s}: got %d, want %d", tc.name, tc.outcome, got, tc.want)
	}
	got := m.count(t, "redlock.losses")
	require.Zero(t, got, "losses: got %d, want 0", got)

	count, sum := m.histogram(t, "redlock.attempt.duration")
	require.Equal(t, uint64(2), count, "attempt.duration count: got %d, want 2", count)
	require.Positive(t, sum, "attempt.duration sum: got %v, want > 0", sum)
	count, sum = m.histogram(t, "redlock.validity")
	require.Equal(t, uint64(1), count, "validity count: got %d, want 1", count)
	require.True(t, sum > 9 && sum < redlock.DefaultTTL.Seconds(), "validity: got %vs, want just under the %v TTL", sum, redlock.DefaultTTL)

	// Every node votes in every round: it answered (yes or no) or was left
	// behind by the quorum (unanswered). None failed.
	for _, tc := range []struct {
		op      string
		rounds  int64
		wantYes int64 // at least
	}{{"lock", 2, 3}, {"extend", 1, 3}, {"unlock", 1, 3}} {
		got := m.count(t, "redlock.node.votes", op(tc.op))
		require.Equal(t, 5*tc.rounds, got, "votes{op=%s}: got %d, want %d", tc.op, got, 5*tc.rounds)
		yes := m.count(t, "redlock.node.votes", op(tc.op), vote("yes"))
		require.GreaterOrEqual(t, yes, tc.wantYes, "votes{op=%s,vote=yes}: got %d, want at least %d", tc.op, yes, tc.wantYes)
		failed := m.count(t, "redlock.node.votes", op(tc.op), vote("failed"))
		require.Zero(t, failed, "votes{op=%s,vote=failed}: got %d, want 0", tc.op, failed)
	}
	for i, mr := range ms {
		got := m.count(t, "redlock.node.votes", node(i), attribute.String("addr", mr.Addr()))
		require.Equal(t, int64(4), got, "votes{node=%d,addr=%s}: got %d, want 4", i, mr.Addr(), got)
	}
}

func TestEndToEndFailedNodes(t *testing.T) {
	obs, reader := newObserver(t)
	ms, cs := nodes(t, 5)
	c := newClient(t, cs, redlock.WithObserver(obs))
	for _, mr := range ms[2:] {
		mr.SetError("ERR injected failure") // not LOADING: go-redis would retry it
	}

	_, err := c.TryLock(t.Context(), "e2e-failed")
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "got %v, want ErrNotAcquired", err)

	m := collect(t, reader)
	got := m.count(t, "redlock.attempts", outcome("not_acquired"))
	require.Equal(t, int64(1), got, "attempts{outcome=not_acquired}: got %d, want 1", got)
	// The round is lost only once three nodes have failed: each of them
	// answered, with an error.
	for i := 2; i < 5; i++ {
		got := m.count(t, "redlock.node.votes", node(i), attribute.String("addr", ms[i].Addr()), vote("failed"))
		require.Equal(t, int64(1), got, "votes{node=%d,vote=failed}: got %d, want 1", i, got)
	}
}

func TestEndToEndAutoExtendAndLoss(t *testing.T) {
	obs, reader := newObserver(t)
	ms, cs := nodes(t, 5)
	c := newClient(t, cs, redlock.WithObserver(obs), redlock.WithTTL(300*time.Millisecond),
		redlock.WithNodeTimeout(100*time.Millisecond))

	auto, err := c.TryLock(t.Context(), "e2e-auto", redlock.WithAutoExtend(true))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return collect(t, reader).count(t, "redlock.extensions", outcome("extended")) >= 2
	}, 5*time.Second, 10*time.Millisecond, "want 2 auto-extensions")
	got := collect(t, reader).count(t, "redlock.node.votes", op("extend"))
	require.Zero(t, got, "votes{op=extend}: got %d, want 0 (auto-extension has no per-node votes)", got)

	// The token vanishes from every node: the next renewal finds it gone.
	for _, mr := range ms {
		mr.Del("e2e-auto")
	}
	select {
	case <-auto.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("auto-extended lock: still held 5s after its key was deleted, want lost")
	}
	require.ErrorIs(t, auto.Err(), redlock.ErrLockLost)

	// A lock without auto-extension expires on the local clock.
	expiring, err := c.TryLock(t.Context(), "e2e-expiring")
	require.NoError(t, err)
	select {
	case <-expiring.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("lock: still held 5s after its 300ms TTL, want expired")
	}

	// Lost is called just after Done closes.
	var m metrics
	require.Eventually(t, func() bool {
		m = collect(t, reader)
		return m.count(t, "redlock.losses") == 2
	}, 5*time.Second, 10*time.Millisecond, "want 2 losses")
	for _, tc := range []struct {
		reason string
		want   int64
	}{{"not_held", 1}, {"expired", 1}, {"max_hold", 0}} {
		got := m.count(t, "redlock.losses", attribute.String("reason", tc.reason))
		require.Equal(t, tc.want, got, "losses{reason=%s}: got %d, want %d", tc.reason, got, tc.want)
	}
	got = m.count(t, "redlock.extensions", outcome("not_extended"))
	require.GreaterOrEqual(t, got, int64(1), "extensions{outcome=not_extended}: got %d, want at least 1", got)
	got = m.count(t, "redlock.releases")
	require.Zero(t, got, "releases: got %d, want 0", got)
}

func TestEndToEndCancelled(t *testing.T) {
	obs, reader := newObserver(t)
	_, cs := nodes(t, 2)
	for range 3 {
		cs = append(cs, dial(t, blackhole(t)))
	}
	// The node timeout is far longer than the caller's deadline, so that the
	// caller's ctx, not the node timeout, ends the attempt.
	c := newClient(t, cs, redlock.WithObserver(obs), redlock.WithNodeTimeout(300*time.Millisecond))

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
	defer cancel()
	_, err := c.TryLock(ctx, "e2e-cancelled")
	require.ErrorIs(t, err, context.DeadlineExceeded, "got %v, want DeadlineExceeded", err)

	m := collect(t, reader)
	got := m.count(t, "redlock.attempts", outcome("cancelled"))
	require.Equal(t, int64(1), got, "attempts{outcome=cancelled}: got %d, want 1", got)
	for i := 2; i < 5; i++ {
		got := m.count(t, "redlock.node.votes", node(i), vote("unanswered"))
		require.Equal(t, int64(1), got, "votes{node=%d,vote=unanswered}: got %d, want 1", i, got)
	}
}

func TestEndToEndOneOfManyWins(t *testing.T) {
	obs, reader := newObserver(t)
	_, cs := nodes(t, 5)
	c := newClient(t, cs, redlock.WithObserver(obs))

	const contenders = 10
	var wg sync.WaitGroup
	for range contenders {
		wg.Go(func() {
			if l, err := c.TryLock(t.Context(), "e2e-race"); err == nil {
				t.Cleanup(func() { _ = l.Unlock(context.Background()) })
			}
		})
	}
	wg.Wait()

	m := collect(t, reader)
	got := m.count(t, "redlock.attempts", outcome("acquired"))
	require.LessOrEqual(t, got, int64(1), "attempts{outcome=acquired}: got %d, want at most 1", got)
	total := m.count(t, "redlock.attempts")
	require.Equal(t, int64(contenders), total, "attempts: got %d, want %d", total, contenders)
	got = m.count(t, "redlock.node.votes", op("lock"))
	require.Equal(t, int64(5*contenders), got, "votes{op=lock}: got %d, want %d", got, 5*contenders)
}

func BenchmarkAttempted(b *testing.B) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	obs, err := redlockotel.New(mp)
	require.NoError(b, err)
	y := redlock.VoteYes
	s := answered(redlock.OpLock, "bench", y, y, y, y, y)
	b.ReportAllocs()
	for b.Loop() {
		obs.Attempted(s, nil)
	}
}
