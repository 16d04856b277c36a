package locktest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestDealEveryKind checks that every len(Kinds) faults hold each kind once,
// so that a short run cannot miss a kind its test counts on, and that the
// order still varies between decks and seeds.
func TestDealEveryKind(t *testing.T) {
	kinds := ReplicatedFaults()
	deal := func(seed uint64, n int) []FaultKind {
		c := &Chaos{s: Schedule{Kinds: kinds}, rnd: rand.New(rand.NewPCG(seed, seed))}
		out := make([]FaultKind, n)
		for i := range out {
			out[i] = c.deal()
		}
		return out
	}
	got := deal(1, 10*len(kinds))
	orders := map[string]bool{}
	for i := 0; i < len(got); i += len(kinds) {
		deck := slices.Clone(got[i : i+len(kinds)])
		orders[fmt.Sprint(deck)] = true
		slices.Sort(deck)
		want := slices.Clone(kinds)
		slices.Sort(want)
		assert.Equal(t, want, deck, "deck %d", i/len(kinds))
	}
	assert.Greater(t, len(orders), 1, "every deck dealt in the same order")
	assert.Equal(t, got, deal(1, len(got)), "one seed, one order")
	assert.NotEqual(t, got, deal(2, len(got)), "another seed, the same order")
}
