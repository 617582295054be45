package redlockotel_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/redlockgo/redlock"
	redlockotel "github.com/redlockgo/redlock/contrib/otel"
)

func ExampleNew() {
	ctx := context.Background()

	// In production the MeterProvider exports, for example over OTLP; here a
	// ManualReader lets the example print what was recorded.
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(ctx) }()

	obs, err := redlockotel.New(mp, redlockotel.WithAttributes(attribute.String("cluster", "locks-eu")))
	if err != nil {
		log.Fatal(err)
	}

	nodes, stop := startNodes()
	defer stop()
	c, err := redlock.New(nodes, redlock.WithObserver(obs))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = c.Close() }()

	l, err := c.TryLock(ctx, "report:2024")
	if err != nil {
		log.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		log.Fatal(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok || m.Name == "redlock.node.votes" { // votes depend on timing
				continue
			}
			for _, dp := range sum.DataPoints {
				fmt.Println(m.Name, dp.Attributes.Encoded(attribute.DefaultEncoder()), dp.Value)
			}
		}
	}
	// Output:
	// redlock.attempts cluster=locks-eu,outcome=acquired 1
	// redlock.releases cluster=locks-eu,outcome=released 1
}

func ExampleWithKeyClass() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(ctx) }()

	// Lock names such as "invoice:2024:17" are many; their prefix is a
	// bounded class.
	byPrefix := func(key string) string {
		class, _, _ := strings.Cut(key, ":")
		return class
	}
	obs, err := redlockotel.New(mp, redlockotel.WithKeyClass(byPrefix))
	if err != nil {
		log.Fatal(err)
	}

	nodes, stop := startNodes()
	defer stop()
	holder, err := redlock.New(nodes)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = holder.Close() }()
	c, err := redlock.New(nodes, redlock.WithObserver(obs))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = c.Close() }()

	held, err := holder.TryLock(ctx, "invoice:2024:17")
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = held.Unlock(ctx) }()
	// This call waits for the holder until its deadline.
	waitCtx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if _, err := c.Lock(waitCtx, "invoice:2024:17"); !errors.Is(err, context.DeadlineExceeded) {
		log.Fatalf("got %v, want the deadline", err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				if m.Name == "redlock.lock.waiters" {
					for _, dp := range data.DataPoints {
						fmt.Println(m.Name, dp.Attributes.Encoded(attribute.DefaultEncoder()), dp.Value)
					}
				}
			case metricdata.Histogram[float64]:
				if m.Name == "redlock.lock.wait.duration" {
					for _, dp := range data.DataPoints {
						fmt.Println(m.Name, dp.Attributes.Encoded(attribute.DefaultEncoder()), "count", dp.Count)
					}
				}
			}
		}
	}
	// Output:
	// redlock.lock.waiters key_class=invoice,kind=lock 0
	// redlock.lock.wait.duration key_class=invoice,kind=lock,outcome=cancelled count 1
}

// startNodes starts 5 in-process Redis masters and returns a connected
// go-redis client for each. stop closes the clients, then the servers.
func startNodes() (clients []redis.UniversalClient, stop func()) {
	var servers []*miniredis.Miniredis
	stop = func() {
		for _, rc := range clients {
			_ = rc.Close()
		}
		for _, m := range servers {
			m.Close()
		}
	}
	for range 5 {
		m, err := miniredis.Run()
		if err != nil {
			stop()
			log.Fatal(err)
		}
		servers = append(servers, m)
		rc := redis.NewClient(&redis.Options{Addr: m.Addr()})
		clients = append(clients, rc)
		if err := rc.Ping(context.Background()).Err(); err != nil {
			stop()
			log.Fatal(err)
		}
	}
	return clients, stop
}
