package classify

// Walks returns how many times the tree was walked.
func (m *Verdicts) Walks() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.walks
}
