// Package alloc allocates a value together with a short slice it owns.
package alloc

// Small is the longest slice that [WithSlice] allocates together with its
// value.
const Small = 7

// WithSlice returns a new zero T and a zeroed slice of n Es. For n up to
// Small they come from one allocation (an allocation saved per call on the
// lock path, where n is the number of nodes); the slice then keeps the T
// alive and the other way round.
func WithSlice[T, E any](n int) (*T, []E) {
	if n > Small {
		return new(T), make([]E, n)
	}
	p := new(struct {
		v T
		s [Small]E
	})
	return &p.v, p.s[:n:n]
}
