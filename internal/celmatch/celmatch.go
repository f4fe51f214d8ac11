// Package celmatch evaluates DRA device selectors with the scheduler's own CEL
// library (k8s.io/dynamic-resource-allocation/cel), so that "which devices does
// this class or request select" gets the same answer the allocator would give.
package celmatch

import (
	"context"
	"fmt"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"
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
}

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
	}
}

// Device is what a selector sees of a device.
type Device struct {
	Driver     string
	Attributes map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
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
	ok, _, err := prog.DeviceMatches(context.Background(), dracel.Device{
		Driver:     dev.Driver,
		Attributes: dev.Attributes,
		Capacity:   dev.Capacity,
	})
	if err != nil {
		return false, fmt.Errorf("CEL runtime error: %w", dracel.EnhanceRuntimeError(err))
	}
	return ok, nil
}
