package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterReadyTimeout bounds how long a new cluster may take to agree on
// its slots.
const clusterReadyTimeout = 20 * time.Second

// Cluster is a Redis Cluster of real redis-servers on loopback: masters
// only, each with a third of the slots, made with redis-cli --cluster
// create.
type Cluster struct {
	// Masters are the cluster's servers, in the order the slots were
	// given: Masters[0] has the first range.
	Masters []*Server
}

// StartCluster starts n redis-servers with cluster mode on, joins them
// into one cluster with redis-cli --cluster create (no replicas), and
// returns once every master says the cluster is ok and covers every slot.
// opts apply to each server. It needs redis-cli next to redis-server or in
// PATH; without it, it fails tb (or skips it, as Require does).
func StartCluster(tb testing.TB, n int, opts Options) *Cluster {
	tb.Helper()
	if n < 3 {
		tb.Fatalf("redistest: a Redis Cluster needs at least 3 masters, got %d", n)
		return nil
	}
	bin := binary(tb)
	if bin == "" {
		return nil
	}
	cli, err := exec.LookPath(filepath.Join(filepath.Dir(bin), "redis-cli"))
	if err != nil {
		if cli, err = exec.LookPath("redis-cli"); err != nil {
			tb.Fatalf("redistest: redis-cli is needed to create a cluster: %v", err)
			return nil
		}
	}
	opts.Args = append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "2000"}, opts.Args...)
	servers := StartN(tb, n, opts)
	if len(servers) == 0 {
		return nil
	}
	args := []string{"--cluster", "create"}
	for _, s := range servers {
		args = append(args, s.Addr())
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
		return nil
	}
	c := &Cluster{Masters: servers}
	if err := c.waitOK(); err != nil {
		tb.Fatalf("redistest: %v\nredis-cli said:\n%s", err, out)
		return nil
	}
	return c
}

// waitOK waits until every master reports cluster_state:ok with every
// slot covered, and knows every other master.
func (c *Cluster) waitOK() error {
	deadline := time.Now().Add(clusterReadyTimeout)
	for _, s := range c.Masters {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
		for {
			info, err := rc.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_slots_ok:16384") &&
				strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(c.Masters))) {
				break
			}
			if time.Now().After(deadline) {
				_ = rc.Close()
				return fmt.Errorf("cluster not ready on %s within %v: %v\n%s", s.Addr(), clusterReadyTimeout, err, info)
			}
			time.Sleep(20 * time.Millisecond)
		}
		_ = rc.Close()
	}
	return nil
}

// Addrs returns the masters' addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Masters))
	for i, s := range c.Masters {
		out[i] = s.Addr()
	}
	return out
}

// NewClient returns a go-redis ClusterClient on the cluster, closed when tb
// ends.
func (c *Cluster) NewClient(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// StartClusters starts n clusters of masters masters each, at once.
func StartClusters(tb testing.TB, n, masters int, opts Options) []*Cluster {
	tb.Helper()
	out := make([]*Cluster, n)
	for i := range out {
		out[i] = StartCluster(tb, masters, opts)
	}
	return out
}

// clients returns a plain client per master, closed by the caller.
func (c *Cluster) clients() []*redis.Client {
	out := make([]*redis.Client, len(c.Masters))
	for i, s := range c.Masters {
		out[i] = redis.NewClient(&redis.Options{Addr: s.Addr()})
	}
	return out
}

// SlotOwner returns the index in Masters of the master that serves slot.
func (c *Cluster) SlotOwner(ctx context.Context, slot int) (int, error) {
	cs := c.clients()
	defer closeAll(cs)
	slots, err := cs[0].ClusterSlots(ctx).Result()
	if err != nil {
		return -1, err
	}
	for _, r := range slots {
		if slot >= r.Start && slot <= r.End && len(r.Nodes) > 0 {
			for i, s := range c.Masters {
				if s.Addr() == r.Nodes[0].Addr {
					return i, nil
				}
			}
		}
	}
	return -1, fmt.Errorf("redistest: no master serves slot %d", slot)
}

// MigrateSlot moves slot, and every key in it, from its owner to
// Masters[to], the way redis-cli --cluster reshard does: IMPORTING on the
// target, MIGRATING on the source, MIGRATE of the keys in batches (they
// keep their TTLs), then SETSLOT NODE on every master. Clients meanwhile
// get ASK redirects for keys already moved, and MOVED once it is done.
// between, when set, runs after each batch of keys.
func (c *Cluster) MigrateSlot(ctx context.Context, slot, to int, between func()) error {
	from, err := c.SlotOwner(ctx, slot)
	if err != nil {
		return err
	}
	if from == to {
		return fmt.Errorf("redistest: slot %d is already on master %d", slot, to)
	}
	cs := c.clients()
	defer closeAll(cs)
	src, dst := cs[from], cs[to]
	srcID, err := src.Do(ctx, "cluster", "myid").Text()
	if err != nil {
		return err
	}
	dstID, err := dst.Do(ctx, "cluster", "myid").Text()
	if err != nil {
		return err
	}
	if err := dst.Do(ctx, "cluster", "setslot", slot, "importing", srcID).Err(); err != nil {
		return fmt.Errorf("redistest: SETSLOT IMPORTING: %w", err)
	}
	if err := src.Do(ctx, "cluster", "setslot", slot, "migrating", dstID).Err(); err != nil {
		return fmt.Errorf("redistest: SETSLOT MIGRATING: %w", err)
	}
	host, port, _ := strings.Cut(c.Masters[to].Addr(), ":")
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, 2).Result()
		if err != nil {
			return fmt.Errorf("redistest: GETKEYSINSLOT: %w", err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"migrate", host, port, "", 0, 5000, "keys"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := src.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("redistest: MIGRATE: %w", err)
		}
		if between != nil {
			between()
		}
	}
	for _, rc := range []*redis.Client{dst, src} {
		if err := rc.Do(ctx, "cluster", "setslot", slot, "node", dstID).Err(); err != nil {
			return fmt.Errorf("redistest: SETSLOT NODE: %w", err)
		}
	}
	for i, rc := range cs {
		if i == from || i == to {
			continue
		}
		if err := rc.Do(ctx, "cluster", "setslot", slot, "node", dstID).Err(); err != nil {
			return fmt.Errorf("redistest: SETSLOT NODE on master %d: %w", i, err)
		}
	}
	return nil
}

func closeAll(cs []*redis.Client) {
	for _, rc := range cs {
		_ = rc.Close()
	}
}
