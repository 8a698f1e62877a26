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
