package redlock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// nameWrongTypes finds, among the nodes of a failed acquisition's last
// attempt that said no, were not waited for, or failed with WRONGTYPE,
// those where a lock key
// holds a value of a type no lock or semaphore uses, and gives their votes ErrWrongType:
// a foreign value is named as such, not shown as taken. A plain SET NX
// cannot tell a foreign list from a held lock, so the nodes that said no
// are asked for their keys' types, once, when the call gives up: never on
// the path of an attempt. The probe is bounded by the node timeout; the
// caller's ctx, which may be what ended the call, does not stop it.
//
// The same probe reads the value of a key that holds a plain lock, and
// gives the votes of the nodes that said no its label as their Holder: the
// acquire requests (SET NX) do not return the value they found, and making
// them would cost every attempt what only a failed call needs.
func (a *acquisition) nameWrongTypes(st *Stats) {
	c := a.c
	ask := make([]bool, len(c.nodes))
	asked := false
	for i := range st.Nodes {
		v := &st.Nodes[i]
		switch {
		case v.Vote == VoteFailed && v.Err != nil && redis.HasErrorPrefix(v.Err, "WRONGTYPE"):
			v.Vote, v.Err = VoteNo, ErrWrongType
			st.Failed--
			st.No++
		case (v.Vote == VoteNo && v.Err == nil) || v.Vote == VoteNotWaited:
			ask[i], asked = true, true
		}
	}
	if !asked {
		return
	}
	// A node's holder is written before its reply is delivered, and read
	// only when the reply was gathered.
	holders := make([]string, len(c.nodes))
	o := c.fanout(context.Background(), &spec{
		op:      "type",
		timeout: a.cfg.nodeTimeout,
		waitAll: true,
		skip: func(i int) error {
			if !ask[i] {
				return errNotAsked
			}
			return nil
		},
		start: func(_ context.Context, lg *leg) {
			lg.n.pipe.Submit(&typeJob{leg: *lg, keys: a.t.rkeys, holder: &holders[lg.n.index]})
		},
	})
	o.finish(nil)
	for i, got := range o.got {
		if got && st.Nodes[i].Vote == VoteNo && st.Nodes[i].Err == nil {
			st.Nodes[i].Holder = holders[i]
		}
		if !got || o.vals[i] <= 0 {
			continue
		}
		v := &st.Nodes[i]
		if v.Vote == VoteNotWaited {
			// Its answer, had it been waited for, was a no.
			st.NotWaited--
			st.No++
		}
		v.Vote, v.Err = VoteNo, ErrWrongType
	}
}

// typeJob reads the types of a lock's keys on one node, and delivers 1 when
// one of them holds a type no lock or semaphore uses, else 0. It sets
// holder, before it delivers, to the label of the first key that holds a
// plain lock with one.
type typeJob struct {
	leg
	keys  []string
	types []*redis.StatusCmd
	// permits reads a semaphore's '#permits' member: a sorted set without
	// it is not ours. Its WRONGTYPE error on other types is ignored.
	permits []*redis.FloatCmd
	// values reads a plain lock's value, for its label. Its WRONGTYPE
	// error on other types is ignored.
	values []*redis.StringCmd
	holder *string
}

func (j *typeJob) Deadline() time.Time { return j.end }
func (j *typeJob) Fail(err error)      { j.leg.deliver(0, err) }

func (j *typeJob) Commands(cmds []redis.Cmder) []redis.Cmder {
	j.types, j.permits, j.values = j.types[:0], j.permits[:0], j.values[:0]
	for _, k := range j.keys {
		typ := redis.NewStatusCmd(context.Background(), "type", k)
		p := redis.NewFloatCmd(context.Background(), "zscore", k, permitsMember)
		v := redis.NewStringCmd(context.Background(), "get", k)
		j.types, j.permits, j.values = append(j.types, typ), append(j.permits, p), append(j.values, v)
		cmds = append(cmds, typ, p, v)
	}
	return cmds
}

func (j *typeJob) Done(time.Time, time.Time) bool {
	for _, v := range j.values {
		if label := labelOf(v.Val()); v.Err() == nil && label != "" {
			*j.holder = label
			break
		}
	}
	for i, cmd := range j.types {
		typ, err := cmd.Result()
		if err != nil {
			j.leg.deliver(0, err)
			return false
		}
		if foreignType(typ, j.permits[i].Err() == nil) {
			j.leg.deliver(1, nil)
			return false
		}
	}
	j.leg.deliver(0, nil)
	return false
}

// foreignType reports whether a key of the given type is nobody's lock: a
// string is a plain lock (ours, redsync's or node-redlock's), a hash an
// owner lock or readers, and a sorted set with a '#permits' member a
// semaphore. Each of them only means "taken" to the others.
func foreignType(typ string, hasPermits bool) bool {
	switch typ {
	case "none", "string", "hash":
		return false
	case "zset":
		return !hasPermits
	}
	return true
}
