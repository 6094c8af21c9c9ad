package resources_test

import (
	"testing"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

func TestParseSelector(t *testing.T) {
	t.Parallel()

	labels := map[string]string{"dc": "nyc", "rack": "r1", "anvil.dev/disk-type": "nvme", "empty": ""}

	for _, tc := range []struct {
		selector string
		terms    []resource.LabelTerm
		matches  bool
		err      string
	}{
		{selector: "", matches: true},
		{selector: "  ", matches: true},
		{
			selector: "dc=nyc",
			terms:    []resource.LabelTerm{{Key: "dc", Op: resource.LabelOpEqual, Value: []string{"nyc"}}},
			matches:  true,
		},
		{selector: "dc==nyc", terms: []resource.LabelTerm{{Key: "dc", Op: resource.LabelOpEqual, Value: []string{"nyc"}}}, matches: true},
		{selector: "dc!=nyc", terms: []resource.LabelTerm{{Key: "dc", Op: resource.LabelOpEqual, Value: []string{"nyc"}, Invert: true}}, matches: false},
		{selector: "zone!=a", terms: []resource.LabelTerm{{Key: "zone", Op: resource.LabelOpEqual, Value: []string{"a"}, Invert: true}}, matches: true},
		{selector: "rack", terms: []resource.LabelTerm{{Key: "rack", Op: resource.LabelOpExists}}, matches: true},
		{selector: "!rack", terms: []resource.LabelTerm{{Key: "rack", Op: resource.LabelOpExists, Invert: true}}, matches: false},
		{selector: "! gpu", terms: []resource.LabelTerm{{Key: "gpu", Op: resource.LabelOpExists, Invert: true}}, matches: true},
		{selector: "empty=", terms: []resource.LabelTerm{{Key: "empty", Op: resource.LabelOpEqual, Value: []string{""}}}, matches: true},
		{
			selector: "dc=nyc, rack!=r2 ,anvil.dev/disk-type in (nvme, ssd)",
			terms: []resource.LabelTerm{
				{Key: "dc", Op: resource.LabelOpEqual, Value: []string{"nyc"}},
				{Key: "rack", Op: resource.LabelOpEqual, Value: []string{"r2"}, Invert: true},
				{Key: "anvil.dev/disk-type", Op: resource.LabelOpIn, Value: []string{"nvme", "ssd"}},
			},
			matches: true,
		},
		{
			selector: "rack notin (r1,r2)",
			terms:    []resource.LabelTerm{{Key: "rack", Op: resource.LabelOpIn, Value: []string{"r1", "r2"}, Invert: true}},
			matches:  false,
		},
		{selector: "dc=nyc,", err: "empty term"},
		{selector: "dc in (a,b", err: "unmatched '('"},
		{selector: "dc in a,b)", err: "unmatched ')'"},
		{selector: "dc=new york", err: "label value"},
		{selector: "d c=x", err: "want key=value"},
		{selector: "dc in (a b)", err: "label value"},
		{selector: "-dc", err: "label key"},
		{selector: "Bad_Prefix/x=1", err: "DNS subdomain"},
	} {
		t.Run(tc.selector, func(t *testing.T) {
			t.Parallel()

			q, err := resources.ParseSelector(tc.selector)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)

				return
			}

			require.NoError(t, err)
			assert.Equal(t, tc.terms, q.Terms)

			var l resource.Labels
			for k, v := range labels {
				l.Set(k, v)
			}

			assert.Equal(t, tc.matches, q.Matches(l))
		})
	}
}
