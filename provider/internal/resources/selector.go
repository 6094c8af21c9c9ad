package resources

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"
)

// setTermRe is "key in (a, b)" or "key notin (a, b)".
var setTermRe = regexp.MustCompile(`^(\S+)\s+(in|notin)\s*\(([^()]*)\)$`)

// ParseSelector parses a label selector in the usual syntax into a COSI label query,
// its terms ANDed:
//
//	key=value, key==value   the label is set to value
//	key!=value              the label is not set to value (or not set at all)
//	key                     the label is set
//	!key                    the label is not set
//	key in (a,b)            the label is set to one of the values
//	key notin (a,b)         the label is not set to any of the values (or not set)
//
// An empty selector matches everything.
func ParseSelector(s string) (resource.LabelQuery, error) {
	var query resource.LabelQuery

	terms, err := splitTerms(s)
	if err != nil {
		return query, err
	}

	for _, raw := range terms {
		term, err := parseTerm(raw)
		if err != nil {
			return resource.LabelQuery{}, fmt.Errorf("error parsing selector term %q: %w", raw, err)
		}

		query.Terms = append(query.Terms, term)
	}

	return query, nil
}

// splitTerms splits on the commas outside parentheses.
func splitTerms(s string) ([]string, error) {
	var (
		terms []string
		depth int
		start int
	)

	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
			if depth < 0 {
				return nil, fmt.Errorf("selector %q has an unmatched ')'", s)
			}
		case ',':
			if depth == 0 {
				terms = append(terms, s[start:i])
				start = i + 1
			}
		}
	}

	if depth != 0 {
		return nil, fmt.Errorf("selector %q has an unmatched '('", s)
	}

	terms = append(terms, s[start:])

	// A wholly empty selector is no terms; an empty term between commas is a mistake.
	if len(terms) == 1 && strings.TrimSpace(terms[0]) == "" {
		return nil, nil
	}

	for i := range terms {
		terms[i] = strings.TrimSpace(terms[i])
		if terms[i] == "" {
			return nil, fmt.Errorf("selector %q has an empty term", s)
		}
	}

	return terms, nil
}

func parseTerm(s string) (resource.LabelTerm, error) {
	if m := setTermRe.FindStringSubmatch(s); m != nil {
		values := strings.Split(m[3], ",")
		for i := range values {
			values[i] = strings.TrimSpace(values[i])
			if err := ValidateLabelValue(values[i]); err != nil {
				return resource.LabelTerm{}, err
			}
		}

		return resource.LabelTerm{Key: m[1], Op: resource.LabelOpIn, Value: values, Invert: m[2] == "notin"}, validKey(m[1])
	}

	for _, op := range []struct {
		sep    string
		invert bool
	}{{"!=", true}, {"==", false}, {"=", false}} {
		key, value, ok := strings.Cut(s, op.sep)
		if !ok {
			continue
		}

		key, value = strings.TrimSpace(key), strings.TrimSpace(value)

		if err := validKey(key); err != nil {
			return resource.LabelTerm{}, err
		}

		if err := ValidateLabelValue(value); err != nil {
			return resource.LabelTerm{}, err
		}

		return resource.LabelTerm{Key: key, Op: resource.LabelOpEqual, Value: []string{value}, Invert: op.invert}, nil
	}

	key, invert := strings.CutPrefix(s, "!")
	key = strings.TrimSpace(key)

	return resource.LabelTerm{Key: key, Op: resource.LabelOpExists, Invert: invert}, validKey(key)
}

func validKey(key string) error {
	if strings.ContainsAny(key, " \t()!=") {
		return errors.New("want key=value, key!=value, key, !key, key in (a,b) or key notin (a,b)")
	}

	return ValidateLabelKey(key)
}
