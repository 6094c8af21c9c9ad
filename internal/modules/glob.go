package modules

// match reports whether name matches the fnmatch-style pattern used in
// modules.alias: '*' matches any run of bytes (including '/', unlike
// path.Match, since DMI strings in a modalias may hold one), '?' one byte,
// and '[...]' a class with ranges and '!' or '^' negation. A malformed class
// never matches, so a bad line cannot make a device load the wrong module.
func match(pattern, name string) bool {
	var starP, starN = -1, 0
	p, n := 0, 0
	for n < len(name) {
		if p < len(pattern) {
			switch c := pattern[p]; c {
			case '*':
				starP, starN = p, n
				p++

				continue
			case '?':
				p++
				n++

				continue
			case '[':
				ok, width := matchClass(pattern[p:], name[n])
				if width > 0 && ok {
					p += width
					n++

					continue
				}
				if width == 0 {
					return false
				}
			default:
				if c == name[n] {
					p++
					n++

					continue
				}
			}
		}
		// Mismatch: let the last '*' swallow one more byte, or fail.
		if starP < 0 {
			return false
		}
		starN++
		p, n = starP+1, starN
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}

	return p == len(pattern)
}

// matchClass matches c against the class opening class[0] == '['. It returns
// the class's width in the pattern, or 0 when the class is not closed.
func matchClass(class string, c byte) (bool, int) {
	i := 1
	negate := false
	if i < len(class) && (class[i] == '!' || class[i] == '^') {
		negate = true
		i++
	}
	matched := false
	first := true
	for i < len(class) {
		if class[i] == ']' && !first {
			return matched != negate, i + 1
		}
		first = false
		lo := class[i]
		hi := lo
		if i+2 < len(class) && class[i+1] == '-' && class[i+2] != ']' {
			hi = class[i+2]
			i += 3
		} else {
			i++
		}
		if lo <= c && c <= hi {
			matched = true
		}
	}

	return false, 0
}
