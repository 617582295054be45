package redlock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDriftAndValidityArithmetic(t *testing.T) {
	require.Equal(t, 102*time.Millisecond, clockDrift(10*time.Second, 0.01))
	require.Equal(t, 2*time.Millisecond, clockDrift(10*time.Second, 0))
	require.Equal(t, 12*time.Millisecond, clockDrift(time.Second, 0.01))
	require.Equal(t, 10*time.Second-300*time.Millisecond-102*time.Millisecond,
		validity(10*time.Second, 300*time.Millisecond, 102*time.Millisecond))
	require.Equal(t, 100*time.Millisecond, defaultNodeTimeout(10*time.Second))
	require.Equal(t, 10*time.Millisecond, defaultNodeTimeout(100*time.Millisecond))
	require.Equal(t, 2*time.Millisecond, defaultNodeTimeout(5*time.Millisecond))
}

func TestValidityDecidesTheAcquisition(t *testing.T) {
	const ttl = 10 * time.Second
	drift := clockDrift(ttl, DefaultDriftFactor) // 102ms
	cases := []struct {
		elapsed time.Duration
		won     bool
	}{
		{time.Second, true},
		{ttl - drift - time.Millisecond, true},
		{ttl - drift, false}, // validity 0 is not enough
		{ttl, false},
	}
	for _, tc := range cases {
		t.Run(tc.elapsed.String(), func(t *testing.T) {
			ms, cs := minis(t, 5)
			clk := &steppedClock{}
			clk.arm(tc.elapsed)
			c, err := New(cs)
			require.NoError(t, err)
			c.now = clk.now
			t.Cleanup(func() { _ = c.Close() })
			l, err := c.TryLock(t.Context(), "validity")
			if !tc.won {
				require.ErrorIs(t, err, ErrNotAcquired)
				var qe *QuorumError
				require.ErrorAs(t, err, &qe)
				require.Equal(t, "no validity left", qe.Reason)
				require.Equal(t, tc.elapsed, qe.Stats.Elapsed)
				require.Equal(t, ttl-tc.elapsed-drift, qe.Stats.Validity)
				eventually(t, ms, "validity", "")
				return
			}
			require.NoError(t, err)
			st := l.Stats()
			require.Equal(t, tc.elapsed, st.Elapsed)
			require.Equal(t, drift, st.Drift)
			require.Equal(t, ttl-tc.elapsed-drift, st.Validity)
			// Until counts from the start of the round: start + ttl - drift.
			require.Equal(t, clk.start().Add(ttl-drift), l.Until())
			require.NoError(t, l.Unlock(t.Context()))
		})
	}
}
