package classify

// Walks returns how many times the tree was walked.
func (m *Memo) Walks() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.walks
}

// Entries returns how many pods the memo holds an entry for.
func (m *Memo) Entries() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.pods)
}

// LeakAsks returns how many claims the memo's leaks asked.
func (m *Memo) LeakAsks() int {
	m.leaks.mu.Lock()
	defer m.leaks.mu.Unlock()
	return m.leaks.asked
}
