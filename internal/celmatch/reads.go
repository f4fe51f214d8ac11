package celmatch

import (
	"slices"
	"strconv"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/dra-exporter/dra-exporter/internal/devattr"
)

// A selector sees a device through device.driver, device.attributes and
// device.capacity. When every read of attributes and capacity names its
// domain and ID with constant strings, the result on a device depends on the
// driver and those values alone: devices that agree on them get the same
// answer, so one evaluation serves them all. A fleet of identical GPUs
// differs in uuid, index and bus ID, which class and request selectors
// rarely read; without this every device paid for a CEL evaluation (and the
// maps the library builds for it) on every new selector.

// qualified is an attribute or capacity name as CEL splits it.
type qualified struct{ domain, id string }

// reads is what an expression reads of a device: the attributes and
// capacities it names, sorted and distinct.
type reads struct {
	attributes, capacity []qualified
}

const deviceVar = "device"

// readsOf parses the expression in the environment it was compiled in and
// returns its reads; false when some read is not by constant names (a whole
// domain map, a computed key, a shadowed device variable, ...).
func readsOf(env *cel.Env, expr string) (reads, bool) {
	if env == nil {
		return reads{}, false
	}
	parsed, iss := env.Parse(expr)
	if iss != nil && iss.Err() != nil {
		return reads{}, false
	}
	w := readWalker{ok: true}
	w.walk(parsed.NativeRep().Expr())
	if !w.ok {
		return reads{}, false
	}
	for _, l := range []*[]qualified{&w.r.attributes, &w.r.capacity} {
		slices.SortFunc(*l, func(a, b qualified) int {
			if c := strings.Compare(a.domain, b.domain); c != 0 {
				return c
			}
			return strings.Compare(a.id, b.id)
		})
		*l = slices.Compact(*l)
	}
	return w.r, true
}

type readWalker struct {
	r  reads
	ok bool
}

func (w *readWalker) walk(e celast.Expr) {
	if !w.ok {
		return
	}
	if field, q, ok := namedRead(e); ok {
		if field == "attributes" {
			w.r.attributes = append(w.r.attributes, q)
		} else {
			w.r.capacity = append(w.r.capacity, q)
		}
		return
	}
	switch e.Kind() {
	case celast.IdentKind:
		if e.AsIdent() == deviceVar {
			w.ok = false // the device as a whole, or one of its maps
		}
		return
	case celast.SelectKind:
		s := e.AsSelect()
		// device.driver is in every key; allowMultipleAllocations is
		// always false here (Device does not carry it).
		if isIdent(s.Operand(), deviceVar) && (s.FieldName() == "driver" || s.FieldName() == "allowMultipleAllocations") {
			return
		}
	case celast.ComprehensionKind:
		c := e.AsComprehension()
		if c.IterVar() == deviceVar || c.IterVar2() == deviceVar || c.AccuVar() == deviceVar {
			w.ok = false
			return
		}
	}
	for _, child := range children(e) {
		w.walk(child)
	}
}

// namedRead matches device.<attributes|capacity>[<domain>].<id> and its
// index and optional forms, with constant domain and ID.
func namedRead(e celast.Expr) (field string, q qualified, ok bool) {
	var domainMap celast.Expr
	switch e.Kind() {
	case celast.SelectKind:
		s := e.AsSelect()
		domainMap, q.id = s.Operand(), s.FieldName()
	case celast.CallKind:
		c := e.AsCall()
		fn := c.FunctionName()
		if c.IsMemberFunction() || len(c.Args()) != 2 || (fn != operators.Index && fn != operators.OptIndex && fn != operators.OptSelect) {
			return "", q, false
		}
		id, isString := stringLiteral(c.Args()[1])
		if !isString {
			return "", q, false
		}
		domainMap, q.id = c.Args()[0], id
	default:
		return "", q, false
	}
	if domainMap.Kind() != celast.CallKind {
		return "", q, false
	}
	c := domainMap.AsCall()
	if c.IsMemberFunction() || len(c.Args()) != 2 || (c.FunctionName() != operators.Index && c.FunctionName() != operators.OptIndex) {
		return "", q, false
	}
	domain, isString := stringLiteral(c.Args()[1])
	if !isString || c.Args()[0].Kind() != celast.SelectKind {
		return "", q, false
	}
	s := c.Args()[0].AsSelect()
	if s.IsTestOnly() || !isIdent(s.Operand(), deviceVar) || (s.FieldName() != "attributes" && s.FieldName() != "capacity") {
		return "", q, false
	}
	q.domain = domain
	return s.FieldName(), q, true
}

func isIdent(e celast.Expr, name string) bool {
	return e.Kind() == celast.IdentKind && e.AsIdent() == name
}

func stringLiteral(e celast.Expr) (string, bool) {
	if e.Kind() != celast.LiteralKind {
		return "", false
	}
	s, ok := e.AsLiteral().(types.String)
	return string(s), ok
}

func children(e celast.Expr) []celast.Expr {
	switch e.Kind() {
	case celast.SelectKind:
		return []celast.Expr{e.AsSelect().Operand()}
	case celast.CallKind:
		c := e.AsCall()
		if c.IsMemberFunction() {
			return append([]celast.Expr{c.Target()}, c.Args()...)
		}
		return c.Args()
	case celast.ListKind:
		return e.AsList().Elements()
	case celast.MapKind:
		var out []celast.Expr
		for _, entry := range e.AsMap().Entries() {
			me := entry.AsMapEntry()
			out = append(out, me.Key(), me.Value())
		}
		return out
	case celast.StructKind:
		var out []celast.Expr
		for _, f := range e.AsStruct().Fields() {
			out = append(out, f.AsStructField().Value())
		}
		return out
	case celast.ComprehensionKind:
		c := e.AsComprehension()
		return []celast.Expr{c.IterRange(), c.AccuInit(), c.LoopCondition(), c.LoopStep(), c.Result()}
	}
	return nil
}

// key encodes what the expression can see of the device; false when the
// device must be evaluated on its own: an attribute the library cannot
// convert (its error names the device's own attribute, read or not), or a
// name published both bare and qualified with the driver's domain (the
// library keeps either, by map order).
func (r reads) key(dev Device, validVersion func(string) bool) (string, bool) {
	if !convertible(dev.Attributes, validVersion) {
		return "", false
	}
	b := make([]byte, 0, 64)
	b = appendString(b, dev.Driver)
	for _, q := range r.attributes {
		a, found, ok := lookup(dev.Attributes.Get, dev.Driver, q)
		if !ok {
			return "", false
		}
		if !found {
			b = append(b, '-')
			continue
		}
		b = appendAttribute(b, a)
	}
	for _, q := range r.capacity {
		c, found, ok := lookup(func(n resourceapi.QualifiedName) (resourceapi.DeviceCapacity, bool) {
			c, ok := dev.Capacity[n]
			return c, ok
		}, dev.Driver, q)
		if !ok {
			return "", false
		}
		if !found {
			b = append(b, '-')
			continue
		}
		b = append(b, 'q')
		b = appendString(b, c.Value.String())
	}
	return string(b), true
}

// lookup finds a name as the library's map of domains sees it: qualified
// with its domain, or bare when the domain is the driver's.
func lookup[V any](get func(resourceapi.QualifiedName) (V, bool), driver string, q qualified) (v V, found, ok bool) {
	v, found = get(resourceapi.QualifiedName(q.domain + "/" + q.id))
	if q.domain == driver && !strings.Contains(q.id, "/") {
		if bare, both := get(resourceapi.QualifiedName(q.id)); both {
			if found {
				return v, false, false
			}
			return bare, true, true
		}
	}
	return v, found, true
}

// convertible reports whether the library turns every attribute into a CEL
// value, in the order of its own switch.
func convertible(attrs devattr.Attributes, validVersion func(string) bool) bool {
	for _, a := range attrs.All {
		switch {
		case a.IntValues != nil, a.BoolValues != nil, a.StringValues != nil:
		case a.VersionValues != nil:
			for _, v := range a.VersionValues {
				if !validVersion(v) {
					return false
				}
			}
		case a.IntValue != nil, a.BoolValue != nil, a.StringValue != nil:
		case a.VersionValue != nil:
			if !validVersion(*a.VersionValue) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// parsesAsVersion is whether the library's semver parser takes the value.
func parsesAsVersion(v string) bool {
	_, err := semver.Parse(v)
	return err == nil
}

// appendAttribute encodes the value the library takes, tagged by its type.
func appendAttribute(b []byte, a resourceapi.DeviceAttribute) []byte {
	switch {
	case a.IntValues != nil:
		b = append(b, 'I')
		b = strconv.AppendInt(b, int64(len(a.IntValues)), 10)
		for _, v := range a.IntValues {
			b = append(b, ':')
			b = strconv.AppendInt(b, v, 10)
		}
	case a.BoolValues != nil:
		b = append(b, 'B')
		b = strconv.AppendInt(b, int64(len(a.BoolValues)), 10)
		for _, v := range a.BoolValues {
			b = append(b, ':')
			b = strconv.AppendBool(b, v)
		}
	case a.StringValues != nil:
		b = append(b, 'S')
		b = strconv.AppendInt(b, int64(len(a.StringValues)), 10)
		for _, v := range a.StringValues {
			b = appendString(b, v)
		}
	case a.VersionValues != nil:
		b = append(b, 'V')
		b = strconv.AppendInt(b, int64(len(a.VersionValues)), 10)
		for _, v := range a.VersionValues {
			b = appendString(b, v)
		}
	case a.IntValue != nil:
		b = append(b, 'i')
		b = strconv.AppendInt(b, *a.IntValue, 10)
	case a.BoolValue != nil:
		b = append(b, 'b')
		b = strconv.AppendBool(b, *a.BoolValue)
	case a.StringValue != nil:
		b = append(b, 's')
		b = appendString(b, *a.StringValue)
	case a.VersionValue != nil:
		b = append(b, 'v')
		b = appendString(b, *a.VersionValue)
	}
	return b
}

// appendString appends a length-prefixed string, so that no value can
// run into the next.
func appendString(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}
