package redlockotel_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redlockgo/redlock"
	redlockotel "github.com/redlockgo/redlock/contrib/otel"
)

// traced returns an Observer on a fresh MeterProvider and TracerProvider,
// the reader that collects its metrics, the recorder of its spans, and the
// TracerProvider, for the test's own parent spans.
func traced(t *testing.T, opts ...redlockotel.Option) (*redlockotel.Observer, *sdkmetric.ManualReader, *tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	obs, err := redlockotel.New(mp, append([]redlockotel.Option{redlockotel.WithTracerProvider(tp)}, opts...)...)
	require.NoError(t, err)
	return obs, reader, spans, tp
}

// waiters sums redlock.lock.waiters over the data points that carry want.
func (m metrics) waiters(t *testing.T, want ...attribute.KeyValue) int64 {
	t.Helper()
	data, ok := m["redlock.lock.waiters"]
	if !ok {
		return 0
	}
	sum, ok := data.(metricdata.Sum[int64])
	require.True(t, ok, "waiters: got %T, want an int64 sum", data)
	require.False(t, sum.IsMonotonic, "waiters: got a monotonic sum, want an UpDownCounter")
	var n int64
	for _, dp := range sum.DataPoints {
		if has(dp.Attributes, want) {
			n += dp.Value
		}
	}
	return n
}

func class(s string) attribute.KeyValue { return attribute.String("key_class", s) }
func kind(k redlock.Kind) attribute.KeyValue {
	return attribute.String("kind", string(k))
}

// holdKey takes key with a Client of its own on cs, until the test ends
// or the returned func unlocks it.
func holdKey(t *testing.T, cs []redis.UniversalClient, key string) (unlock func()) {
	t.Helper()
	holder := newClient(t, cs)
	l, err := holder.TryLock(t.Context(), key)
	require.NoError(t, err)
	var once sync.Once
	unlock = func() { once.Do(func() { _ = l.Unlock(context.Background()) }) }
	t.Cleanup(unlock)
	return unlock
}

// startWaiters starts n Lock calls on key with ctx, and returns their
// errors' channel.
func startWaiters(c *redlock.Client, ctx context.Context, key string, n int) <-chan error {
	errs := make(chan error, n)
	for range n {
		go func() {
			l, err := c.Lock(ctx, key)
			if err == nil {
				err = l.Unlock(context.Background())
			}
			errs <- err
		}()
	}
	return errs
}

func TestWaitersReturnToZero(t *testing.T) {
	obs, reader, _, _ := traced(t)
	_, cs := nodes(t, 5)
	holdKey(t, cs, "waiters")
	c, err := redlock.New(cs, redlock.WithObserver(obs), redlock.WithRetryDelay(20*time.Millisecond, 40*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	const n = 4

	ctx, cancel := context.WithCancel(t.Context())
	errs := startWaiters(c, ctx, "waiters", n)
	require.Eventually(t, func() bool { return collect(t, reader).waiters(t) == n }, 10*time.Second, 5*time.Millisecond,
		"got %d waiters, want %d", collect(t, reader).waiters(t), n)
	m := collect(t, reader)
	require.Equal(t, int64(n), m.waiters(t, class("default"), kind(redlock.KindLock)))
	cancel()
	for range n {
		require.ErrorIs(t, <-errs, context.Canceled)
	}
	m = collect(t, reader)
	require.Zero(t, m.waiters(t), "after the cancels")
	count, _ := m.histogram(t, "redlock.lock.wait.duration", outcome("cancelled"), class("default"), kind(redlock.KindLock))
	require.Equal(t, uint64(n), count, "cancelled waits")

	// Close ends the waits: they are counted out before Close returns.
	errs = startWaiters(c, t.Context(), "waiters", n)
	require.Eventually(t, func() bool { return collect(t, reader).waiters(t) == n }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, c.Close())
	m = collect(t, reader)
	require.Zero(t, m.waiters(t), "after Close")
	for range n {
		require.ErrorIs(t, <-errs, redlock.ErrClosed)
	}
	count, _ = m.histogram(t, "redlock.lock.wait.duration", outcome("not_acquired"))
	require.Equal(t, uint64(n), count, "waits ended by Close")
}

func TestWaitDurationOfAcquiredWaitsOnly(t *testing.T) {
	obs, reader, _, _ := traced(t)
	_, cs := nodes(t, 5)
	unlock := holdKey(t, cs, "wait-acquired")
	c := newClient(t, cs, redlock.WithObserver(obs), redlock.WithRetryDelay(20*time.Millisecond, 40*time.Millisecond))

	// TryLock never waits, nor does a Lock that wins at once.
	_, err := c.TryLock(t.Context(), "wait-acquired")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	l, err := c.Lock(t.Context(), "wait-free")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))
	count, _ := collect(t, reader).histogram(t, "redlock.lock.wait.duration")
	require.Zero(t, count, "calls that did not wait")

	errs := startWaiters(c, t.Context(), "wait-acquired", 1)
	require.Eventually(t, func() bool { return collect(t, reader).waiters(t) == 1 }, 10*time.Second, 5*time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	unlock()
	require.NoError(t, <-errs)
	m := collect(t, reader)
	require.Zero(t, m.waiters(t))
	count, sum := m.histogram(t, "redlock.lock.wait.duration", outcome("acquired"))
	require.Equal(t, uint64(1), count)
	require.GreaterOrEqual(t, sum, 0.05, "got a wait of %vs, want at least the 50ms it waited", sum)
}

func TestHeldDuration(t *testing.T) {
	obs, reader, _, _ := traced(t)
	ms, cs := nodes(t, 5)
	for _, m := range ms {
		m.ClockTTL(true)
	}
	c := newClient(t, cs, redlock.WithObserver(obs), redlock.WithNodeTimeout(50*time.Millisecond))
	ctx := t.Context()

	l, err := c.TryLock(ctx, "held-released")
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, l.Unlock(ctx))

	l, err = c.TryLock(ctx, "held-not-released")
	require.NoError(t, err)
	for _, m := range ms {
		m.Del("held-not-released")
	}
	require.ErrorIs(t, l.Unlock(ctx), redlock.ErrNotHeld)

	l, err = c.TryLock(ctx, "held-lost", redlock.WithTTL(200*time.Millisecond))
	require.NoError(t, err)
	<-l.Done()
	// HoldEnded for a loss comes from the notifier, after Done.
	require.Eventually(t, func() bool {
		n, _ := collect(t, reader).histogram(t, "redlock.lock.held.duration", outcome("lost"))
		return n == 1
	}, 10*time.Second, 5*time.Millisecond)

	m := collect(t, reader)
	count, sum := m.histogram(t, "redlock.lock.held.duration", outcome("released"), class("default"), kind(redlock.KindLock))
	require.Equal(t, uint64(1), count)
	require.GreaterOrEqual(t, sum, 0.02)
	count, _ = m.histogram(t, "redlock.lock.held.duration", outcome("not_released"))
	require.Equal(t, uint64(1), count)
	count, sum = m.histogram(t, "redlock.lock.held.duration", outcome("lost"))
	require.Equal(t, uint64(1), count)
	require.LessOrEqual(t, sum, 0.2, "got %vs, want no more than the TTL", sum)
}

func TestKeyClass(t *testing.T) {
	byPrefix := func(key string) string {
		p, _, _ := strings.Cut(key, ":")
		return p
	}
	obs, reader, spans, _ := traced(t, redlockotel.WithKeyClass(byPrefix), redlockotel.WithKeyAttribute(true))
	_, cs := nodes(t, 5)
	c := newClient(t, cs, redlock.WithObserver(obs))
	for _, key := range []string{"invoice:1", "invoice:2", "user:7"} {
		l, err := c.TryLock(t.Context(), key)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(t.Context()))
	}
	sets := collect(t, reader).attrSets()["redlock.lock.held.duration"]
	require.Len(t, sets, 2, "got %d attribute sets, want one per class", len(sets))
	for _, set := range sets {
		_, ok := set.Value("key")
		require.False(t, ok, "got the raw key in %v, want only the class", set.Encoded(attribute.DefaultEncoder()))
	}
	count, _ := collect(t, reader).histogram(t, "redlock.lock.held.duration", class("invoice"))
	require.Equal(t, uint64(2), count)
	count, _ = collect(t, reader).histogram(t, "redlock.lock.held.duration", class("user"))
	require.Equal(t, uint64(1), count)
	// The key attribute still goes where it went: the attempts counter.
	require.Equal(t, int64(1), collect(t, reader).count(t, "redlock.attempts", attribute.String("key", "user:7")))

	ended := spans.Ended()
	require.Len(t, ended, 3)
	got := map[string]string{}
	for _, s := range ended {
		a := spanAttrs(s)
		got[a["redlock.key"].AsString()] = a["redlock.key_class"].AsString()
	}
	require.Equal(t, map[string]string{"invoice:1": "invoice", "invoice:2": "invoice", "user:7": "user"}, got)
}

// spanAttrs returns a span's attributes by key.
func spanAttrs(s sdktrace.ReadOnlySpan) map[string]attribute.Value {
	out := map[string]attribute.Value{}
	for _, kv := range s.Attributes() {
		out[string(kv.Key)] = kv.Value
	}
	return out
}

func TestOneSpanPerCall(t *testing.T) {
	obs, _, spans, tp := traced(t, redlockotel.WithAttributes(attribute.String("cluster", "eu")))
	_, cs := nodes(t, 5)
	unlock := holdKey(t, cs, "span-waited")
	c := newClient(t, cs, redlock.WithObserver(obs), redlock.WithRetryDelay(20*time.Millisecond, 40*time.Millisecond))
	ctx, parent := tp.Tracer("test").Start(t.Context(), "parent")

	// A failed TryLock.
	_, err := c.TryLock(ctx, "span-waited")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	// A Lock that waits, then wins.
	go func() {
		time.Sleep(100 * time.Millisecond)
		unlock()
	}()
	l, err := c.Lock(ctx, "span-waited")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	// A call refused for its options has no span.
	_, err = c.Lock(ctx, "span-invalid", redlock.WithTTL(-time.Second))
	require.ErrorIs(t, err, redlock.ErrInvalidOption)
	parent.End()

	var ours []sdktrace.ReadOnlySpan
	for _, s := range spans.Ended() {
		if s.Name() == "redlock.Lock" {
			ours = append(ours, s)
		}
	}
	require.Len(t, ours, 2, "got %d spans, want one per traced call", len(ours))
	for _, s := range ours {
		require.Equal(t, parent.SpanContext().SpanID(), s.Parent().SpanID(), "got parent %v, want the caller's span", s.Parent().SpanID())
		require.Equal(t, parent.SpanContext().TraceID(), s.SpanContext().TraceID())
		a := spanAttrs(s)
		require.Equal(t, "default", a["redlock.key_class"].AsString())
		require.Equal(t, "lock", a["redlock.kind"].AsString())
		require.Equal(t, "eu", a["cluster"].AsString())
		_, ok := a["redlock.key"]
		require.False(t, ok, "got the key without WithKeyAttribute")
		_, ok = a["redlock.queue.place"]
		require.False(t, ok, "got a queue place for a plain lock")
	}
	try, lock := spanAttrs(ours[0]), spanAttrs(ours[1])
	require.Equal(t, codes.Error, ours[0].Status().Code, "a failed TryLock")
	require.Equal(t, int64(1), try["redlock.attempts"].AsInt64())
	require.Equal(t, "not_acquired", try["redlock.outcome"].AsString())
	require.NotEmpty(t, ours[0].Events(), "the error is recorded")
	require.Equal(t, codes.Unset, ours[1].Status().Code, "a Lock that won")
	require.GreaterOrEqual(t, lock["redlock.attempts"].AsInt64(), int64(2))
	require.GreaterOrEqual(t, lock["redlock.waited"].AsFloat64(), 0.05)
	require.Equal(t, "acquired", lock["redlock.outcome"].AsString())
}

func TestSpanEndsOnClose(t *testing.T) {
	obs, _, spans, _ := traced(t)
	_, cs := nodes(t, 5)
	holdKey(t, cs, "span-close")
	c, err := redlock.New(cs, redlock.WithObserver(obs))
	require.NoError(t, err)
	errs := startWaiters(c, t.Context(), "span-close", 3)
	require.Eventually(t, func() bool { return len(spans.Started()) == 3 }, 10*time.Second, 5*time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, c.Close())
	require.Len(t, spans.Ended(), 3, "every span ended by the time Close returned")
	for _, s := range spans.Ended() {
		require.Equal(t, codes.Error, s.Status().Code)
		require.Contains(t, s.Status().Description, "closed")
	}
	for range 3 {
		require.True(t, errors.Is(<-errs, redlock.ErrClosed))
	}
}

func TestNewRejectsNilTracerProvider(t *testing.T) {
	_, err := redlockotel.New(sdkmetric.NewMeterProvider(), redlockotel.WithTracerProvider(nil))
	require.ErrorIs(t, err, redlockotel.ErrInvalidOption)
	require.ErrorContains(t, err, "nil TracerProvider")
	for _, k := range []string{"key_class", "kind"} {
		_, err := redlockotel.New(sdkmetric.NewMeterProvider(), redlockotel.WithAttributes(attribute.String(k, "x")))
		require.ErrorIs(t, err, redlockotel.ErrInvalidOption, "%s: got %v", k, err)
	}
}
