package replica

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMinor(t *testing.T) {
	t.Parallel()

	for in, want := range map[string]string{
		"v1.4.2": "1.4", "1.4.2": "1.4", "v1.4": "1.4", "v2.0.0-alpha.1": "2.0",
		"dev": "dev", "": "", "v1": "v1", "v.": "v.",
	} {
		assert.Equal(t, want, minor(in), in)
	}
}
