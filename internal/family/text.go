package family

// A series' line in the text exposition (text 0.0.4), as expfmt writes it
// for a const gauge: the engine keeps these lines, and converts them to
// OpenMetrics and protobuf as it writes them.

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"
)

// LabelOrder returns the positions of the family's labels sorted by name:
// the order client_golang writes and sorts label pairs in.
func (d *Def) LabelOrder() []int {
	d.orderOnce.Do(func() {
		d.order = make([]int, len(d.Labels))
		for i := range d.order {
			d.order[i] = i
		}
		slices.SortStableFunc(d.order, func(a, b int) int { return strings.Compare(d.Labels[a], d.Labels[b]) })
	})
	return d.order
}

// AppendText writes the family's HELP and TYPE lines and its series
// sorted as Gather sorts them: by their label values in label-name order, a
// repeated label set written once.
func (d *Def) AppendText(buf []byte, samples []Sample) []byte {
	order := d.LabelOrder()
	// A stable order by label values: pdqsort on positions, ties broken by
	// position (the stable sort's in-place merging was a third of a
	// scrape's time at 100k claims).
	pos := make([]int32, len(samples))
	for i := range pos {
		pos[i] = int32(i)
	}
	slices.SortFunc(pos, func(a, b int32) int {
		la, lb := samples[a].LabelValues, samples[b].LabelValues
		for _, i := range order {
			if c := strings.Compare(la[i], lb[i]); c != 0 {
				return c
			}
		}
		return cmp.Compare(a, b)
	})
	if buf == nil {
		// The first series' length, times the series, and some room.
		buf = make([]byte, 0, 128+len(d.Help)+len(samples)*(lineLength(d, samples[0])+8))
	}
	buf = d.AppendHeader(buf)
	for k, p := range pos {
		if k > 0 && slices.Equal(samples[p].LabelValues, samples[pos[k-1]].LabelValues) {
			continue // a repeated label set: Gather keeps the first
		}
		buf = d.AppendLine(buf, samples[p])
	}
	return buf
}

// AppendHeader writes the family's HELP and TYPE lines.
func (d *Def) AppendHeader(buf []byte) []byte {
	buf = append(buf, "# HELP "...)
	buf = append(buf, d.Name...)
	buf = append(buf, ' ')
	buf = appendEscaped(buf, d.Help, false)
	buf = append(buf, "\n# TYPE "...)
	buf = append(buf, d.Name...)
	buf = append(buf, ' ')
	buf = append(buf, d.Type...)
	return append(buf, '\n')
}

// AppendLine writes one series.
func (d *Def) AppendLine(buf []byte, s Sample) []byte {
	order := d.LabelOrder()
	buf = append(buf, d.Name...)
	for j, li := range order {
		if j == 0 {
			buf = append(buf, '{')
		} else {
			buf = append(buf, ',')
		}
		buf = append(buf, d.Labels[li]...)
		buf = append(buf, '=', '"')
		buf = appendEscaped(buf, s.LabelValues[li], true)
		buf = append(buf, '"')
	}
	if len(order) > 0 {
		buf = append(buf, '}')
	}
	buf = append(buf, ' ')
	buf = appendFloat(buf, s.Value)
	return append(buf, '\n')
}

// lineLength estimates the length of a series' line.
func lineLength(d *Def, s Sample) int {
	n := len(d.Name) + 24
	for i, l := range d.Labels {
		n += len(l) + len(s.LabelValues[i]) + 4
	}
	return n
}

// appendEscaped escapes backslashes and newlines, and double quotes when
// quote is set, as expfmt does.
func appendEscaped(buf []byte, s string, quote bool) []byte {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '\\' || c == '\n' || c == '"' {
			clean = false
			break
		}
	}
	if clean {
		return append(buf, s...)
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			buf = append(buf, '\\', '\\')
		case c == '\n':
			buf = append(buf, '\\', 'n')
		case c == '"' && quote:
			buf = append(buf, '\\', '"')
		default:
			buf = append(buf, c)
		}
	}
	return buf
}

// appendFloat formats a value as expfmt's text format does (OpenMetrics:
// appendOpenMetricsLine).
func appendFloat(buf []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(buf, "NaN"...)
	case math.IsInf(f, +1):
		return append(buf, "+Inf"...)
	case math.IsInf(f, -1):
		return append(buf, "-Inf"...)
	case f == 0: // negative zero too
		return append(buf, '0')
	}
	return strconv.AppendFloat(buf, f, 'g', -1, 64)
}
