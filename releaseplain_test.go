package redlock

import (
	"context"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/keyspace"
)

// TestReleasePlainAgreesWithRelease runs releaseplain.lua and release.lua on
// the same states of one plain key, on miniredis and on a real redis-server,
// and requires the same reply, the same keys left, and the same
// announcements.
func TestReleasePlainAgreesWithRelease(t *testing.T) {
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		rc := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { _ = rc.Close() })
		releaseScriptsAgree(t, rc)
	})
	t.Run("redis-server", func(t *testing.T) {
		_, cs := realNodes(t, 1)
		releaseScriptsAgree(t, cs[0].(*redis.Client))
	})
}

func releaseScriptsAgree(t *testing.T, rc *redis.Client) {
	const (
		key   = "rp"
		value = "0b7e2f9c-5a61-4a3e-9d1b-2c4f6e8a0b1d.1"
	)
	marker, channel := keyspace.Waiting(key), keyspace.Channel(key)
	cases := []struct {
		name    string
		setup   func(ctx context.Context)
		channel string // "" for a rollback
		want    int64
	}{
		{"held, a waiter marked it", func(ctx context.Context) {
			rc.Set(ctx, key, value, 0)
			rc.Set(ctx, marker, "1", 0)
		}, channel, 1},
		{"held, nobody waits", func(ctx context.Context) { rc.Set(ctx, key, value, 0) }, channel, 1},
		{"held, a rollback leaves the marker", func(ctx context.Context) {
			rc.Set(ctx, key, value, 0)
			rc.Set(ctx, marker, "1", 0)
		}, "", 1},
		{"another value", func(ctx context.Context) {
			rc.Set(ctx, key, value+"0", 0)
			rc.Set(ctx, marker, "1", 0)
		}, channel, -1},
		{"gone", func(ctx context.Context) { rc.Set(ctx, marker, "1", 0) }, channel, 0},
		{"another type", func(ctx context.Context) { rc.HSet(ctx, key, "owner", "o") }, channel, -1},
	}
	type result struct {
		reply          int64
		key, markerVal string
		announced      []string
	}
	run := func(t *testing.T, setup func(context.Context), eval func(ctx context.Context) (int64, error)) result {
		ctx := t.Context()
		require.NoError(t, rc.FlushAll(ctx).Err())
		setup(ctx)
		ps := rc.Subscribe(ctx, channel)
		defer ps.Close()
		_, err := ps.Receive(ctx) // the subscription is in place
		require.NoError(t, err)
		var r result
		r.reply, err = eval(ctx)
		require.NoError(t, err)
		r.key = rc.Type(ctx, key).Val() + ":" + rc.Get(ctx, key).Val()
		r.markerVal = rc.Get(ctx, marker).Val()
		// The test's own message ends the ones the script sent.
		require.NoError(t, rc.Publish(ctx, channel, "end").Err())
		for {
			msg, err := ps.ReceiveMessage(ctx)
			require.NoError(t, err)
			if msg.Payload == "end" {
				return r
			}
			r.announced = append(r.announced, msg.Payload)
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			full := run(t, tc.setup, func(ctx context.Context) (int64, error) {
				args := []any{value, "", "0"}
				if tc.channel != "" {
					args = append(args, tc.channel)
				}
				return scripts[scriptRelease].run(ctx, rc, []string{key, marker}, args...).Int64()
			})
			plain := run(t, tc.setup, func(ctx context.Context) (int64, error) {
				return scripts[scriptReleasePlain].run(ctx, rc, []string{key, marker}, value, tc.channel).Int64()
			})
			require.Equal(t, tc.want, full.reply, "release.lua's reply")
			require.Equal(t, full, plain, "releaseplain.lua must do what release.lua does")
		})
	}
}
