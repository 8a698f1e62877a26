// Package policywatch follows the policy's files with inotify and says
// when the daemon should load them again: an edit (in place, or an
// editor's write-and-rename), a file added to or removed from policy.d,
// and a Kubernetes ConfigMap update (kubelet swaps the ..data symlink) all
// end in one signal, after the files have been quiet for a moment.
package policywatch
