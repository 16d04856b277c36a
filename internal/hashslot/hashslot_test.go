package hashslot

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSlot(t *testing.T) {
	assert.Equal(t, uint16(0x31C3), crc16("123456789"), "the XMODEM check value")
	for _, tc := range []struct {
		key  string
		slot int
	}{
		// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
		{"foo", 12182},
		{"bar", 5061},
		{"{user1000}.following", Slot("user1000")},
		{"{user1000}.followers", Slot("user1000")},
		{"foo{}{bar}", Slot("foo{}{bar}")}, // empty first tag: the whole key
		{"foo{{bar}}zap", Slot("{bar")},
		{"foo{bar}{zap}", Slot("bar")},
	} {
		assert.Equal(t, tc.slot, Slot(tc.key), tc.key)
	}
}

func TestTag(t *testing.T) {
	var tags Tags
	for _, slot := range []int{0, 1, 12182, Count - 1} {
		assert.Equal(t, slot, Slot(tags.Tag(slot)))
		assert.Equal(t, slot, Slot("x:{"+tags.Tag(slot)+"}"))
	}
	for s := range Count {
		if Slot(tags.Tag(s)) != s {
			t.Fatalf("tags.Tag(%d) = %q is in slot %d", s, tags.Tag(s), Slot(tags.Tag(s)))
		}
	}
}
