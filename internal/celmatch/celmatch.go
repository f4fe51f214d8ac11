// Package celmatch evaluates DRA device selectors with the scheduler's own CEL
// library (k8s.io/dynamic-resource-allocation/cel), so that "which devices does
// this class or request select" gets the same answer the allocator would give.
package celmatch

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	resourceapi "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"

	"github.com/dra-exporter/dra-exporter/internal/devattr"
)

// cacheSize bounds the compiled-program cache. Selector expressions are few
// (one per class and per distinct claim selector), so this is generous.
const cacheSize = 4096

// Matcher compiles and evaluates selector expressions. It is safe for
// concurrent use.
type Matcher struct {
	cache *dracel.Cache

	// The library does not cache failed compilations; a broken class
	// selector would otherwise be recompiled once per device.
	mu            sync.Mutex
	compileErrors map[string]error
	// byValues keeps, per expression, results by the values it reads
	// (reads.go).
	byValues map[string]*valueResults
	// versions keeps whether a version string parses: a fleet has a
	// handful, and every keyed match checks them.
	versions map[string]bool
	// evaluations counts CEL evaluations (tests read it).
	evaluations atomic.Int64
}

// valueResults are one expression's results by the key of the values it
// reads; usable is false when its reads are not by constant names.
type valueResults struct {
	reads   reads
	usable  bool
	results map[string]result
}

type result struct {
	ok  bool
	err error
}

// valueResultsSize bounds the results kept for one expression: an
// expression that reads a per-device value (uuid) keeps a sample and
// evaluates the rest.
const valueResultsSize = 1024

// New returns a Matcher with the CEL features a 1.36+ scheduler enables.
// Enabling more features than the cluster does never rejects an expression
// the API server already accepted.
func New() *Matcher {
	return &Matcher{
		cache: dracel.NewCache(cacheSize, dracel.Features{
			EnableConsumableCapacity: true,
			EnableListTypeAttributes: true,
		}),
		compileErrors: map[string]error{},
		byValues:      map[string]*valueResults{},
		versions:      map[string]bool{},
	}
}

// Device is what a selector sees of a device.
type Device struct {
	Driver     string
	Attributes devattr.Attributes
	Capacity   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity
}

// Match reports whether dev satisfies every selector, the way the scheduler
// combines class and request selectors (logical AND). An error (a selector
// that does not compile, or fails at runtime on this device) means the
// scheduler could not use the device either; the device does not match.
func (m *Matcher) Match(selectors []resourceapi.DeviceSelector, dev Device) (bool, error) {
	for i, sel := range selectors {
		if sel.CEL == nil {
			continue
		}
		ok, err := m.eval(sel.CEL.Expression, dev)
		if err != nil {
			return false, fmt.Errorf("selector #%d: %w", i, err)
		}
		if !ok {
			return false, nil
		}
	}
	return true, nil
}

// Compile reports whether every selector compiles, without evaluating it.
func (m *Matcher) Compile(selectors []resourceapi.DeviceSelector) error {
	for i, sel := range selectors {
		if sel.CEL == nil {
			continue
		}
		if _, err := m.compile(sel.CEL.Expression); err != nil {
			return fmt.Errorf("selector #%d: %w", i, err)
		}
	}
	return nil
}

func (m *Matcher) compile(expr string) (dracel.CompilationResult, error) {
	m.mu.Lock()
	err, failed := m.compileErrors[expr]
	m.mu.Unlock()
	if failed {
		return dracel.CompilationResult{}, err
	}
	res := m.cache.GetOrCompile(expr)
	if res.Error != nil {
		err := fmt.Errorf("CEL compile error: %s", res.Error.Detail)
		m.mu.Lock()
		if len(m.compileErrors) < cacheSize {
			m.compileErrors[expr] = err
		}
		m.mu.Unlock()
		return res, err
	}
	return res, nil
}

func (m *Matcher) eval(expr string, dev Device) (bool, error) {
	prog, err := m.compile(expr)
	if err != nil {
		return false, err
	}
	vr := m.valueResultsOf(expr, prog)
	key, keyed := "", false
	if vr.usable {
		key, keyed = vr.reads.key(dev, m.validVersion)
	}
	if keyed {
		m.mu.Lock()
		r, hit := vr.results[key]
		m.mu.Unlock()
		if hit {
			return r.ok, r.err
		}
	}
	var r result
	m.evaluations.Add(1)
	r.ok, r.err = evaluate(prog, dev)
	if keyed {
		m.mu.Lock()
		if len(vr.results) < valueResultsSize {
			vr.results[key] = r
		}
		m.mu.Unlock()
	}
	return r.ok, r.err
}

// validVersion reports whether the version string parses, keeping the
// answer for a bounded number of strings.
func (m *Matcher) validVersion(v string) bool {
	m.mu.Lock()
	ok, kept := m.versions[v]
	m.mu.Unlock()
	if kept {
		return ok
	}
	ok = parsesAsVersion(v)
	m.mu.Lock()
	if len(m.versions) < valueResultsSize {
		m.versions[v] = ok
	}
	m.mu.Unlock()
	return ok
}

// valueResultsOf returns the expression's results by value, finding its
// reads the first time.
func (m *Matcher) valueResultsOf(expr string, prog dracel.CompilationResult) *valueResults {
	m.mu.Lock()
	vr := m.byValues[expr]
	m.mu.Unlock()
	if vr != nil {
		return vr
	}
	vr = &valueResults{results: map[string]result{}}
	vr.reads, vr.usable = readsOf(prog.Environment, expr)
	m.mu.Lock()
	if kept := m.byValues[expr]; kept != nil {
		vr = kept
	} else if len(m.byValues) < cacheSize {
		m.byValues[expr] = vr
	}
	m.mu.Unlock()
	return vr
}

// evaluate runs the compiled selector on the device.
func evaluate(prog dracel.CompilationResult, dev Device) (bool, error) {
	ok, _, err := prog.DeviceMatches(context.Background(), dracel.Device{
		Driver:     dev.Driver,
		Attributes: dev.Attributes.Map(),
		Capacity:   dev.Capacity,
	})
	if err != nil {
		return false, fmt.Errorf("CEL runtime error: %w", dracel.EnhanceRuntimeError(err))
	}
	return ok, nil
}
