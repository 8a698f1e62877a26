package sysfs

// Name is a disk's name, checked by ValidateName: only ParseName (and
// this package, for names it lists from the tree) makes one, so whoever
// holds a Name holds one a path can be built from, and no step after
// the one where the name entered (a uevent, a scan, a command's
// argument) checks it again. The zero Name is no disk's.
type Name struct{ s string }

// ParseName checks name (ValidateName) and returns it as a Name.
func ParseName(name string) (Name, error) {
	if err := ValidateName(name); err != nil {
		return Name{}, err
	}
	return Name{name}, nil
}

// String is the name as the kernel spells it.
func (n Name) String() string { return n.s }

// IsZero reports whether n is the zero Name, no disk's.
func (n Name) IsZero() bool { return n.s == "" }

// Names is Disks, as Names: listed from the tree, each checked there.
func (s FS) Names() ([]Name, error) {
	names, err := s.Disks()
	out := make([]Name, len(names))
	for i, n := range names {
		out[i] = Name{n}
	}
	return out, err
}

// Queue is a disk's queue attributes reached by the disk's name from the
// root on each access (through the directory a read found, else
// block/NAME), where a Disk holds the disk's directory open: for a pass
// that re-reads a few attributes and writes what drifted, to which
// opening the directory would add more lookups than it spares. Its
// methods are FS's, for this disk, without checking the name again.
type Queue struct {
	fs   FS
	name Name
}

// Queue is the queue of the disk name.
func (s FS) Queue(name Name) Queue { return Queue{s, name} }

// Name is the disk's name.
func (q Queue) Name() Name { return q.name }

// ReadQueueAttr reads queue/<attr>, as FS.ReadQueueAttr.
func (q Queue) ReadQueueAttr(attr string) (string, error) {
	if q.name.IsZero() {
		return "", ErrInvalidName
	}
	return q.fs.readQueueAttr(q.name.s, attr)
}

// ReadScheduler reads queue/scheduler, as FS.ReadScheduler.
func (q Queue) ReadScheduler() (active string, offered []string, err error) {
	if q.name.IsZero() {
		return "", nil, ErrInvalidName
	}
	return q.fs.readScheduler(q.name.s)
}

// WriteReadQueueAttr writes queue/<attr> and reads it back, as
// FS.WriteReadQueueAttr.
func (q Queue) WriteReadQueueAttr(attr, value string) (got string, written bool, err error) {
	if q.name.IsZero() {
		return "", false, ErrInvalidName
	}
	return q.fs.writeReadQueueAttr(q.name.s, attr, value)
}

// Exists reports whether a disk of this name is in the tree.
func (q Queue) Exists() bool { return !q.name.IsZero() && q.fs.exists(q.name.s) }
