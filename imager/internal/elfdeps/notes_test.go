package elfdeps

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// note is one ELF note as a linker lays it out: header, name and descriptor, each padded
// to 4 bytes with zeros.
func note(order binary.AppendByteOrder, name string, typ uint32, desc string) []byte {
	pad := func(b []byte) []byte { return append(b, make([]byte, (4-len(b)%4)%4)...) }

	n := append([]byte(name), 0)
	b := order.AppendUint32(nil, uint32(len(n)))
	b = order.AppendUint32(b, uint32(len(desc)))
	b = order.AppendUint32(b, typ)

	return append(append(b, pad(n)...), pad([]byte(desc))...)
}

func TestParseDlopenNotes(t *testing.T) {
	t.Parallel()

	le, be := binary.LittleEndian, binary.BigEndian

	// What systemd's ELF_NOTE_DLOPEN writes: one feature per note, its sonames in order of
	// preference; udev's kmod feature and a two-feature note as other tools write them.
	kmod := `[{"feature":"kmod","description":"Support for loadable modules","priority":"recommended","soname":["libkmod.so.2"]}]`
	two := `[{"feature":"zstd","soname":["libzstd.so.1"]},{"feature":"lz4","soname":["liblz4.so.1","liblz4.so.2"]}]`
	notes := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}

		return b
	}

	for _, tc := range []struct {
		name  string
		data  []byte
		order binary.ByteOrder
		want  [][]string
		err   string
	}{
		{name: "empty section", data: nil, order: le},
		{name: "one FDO note, two features", data: note(le, "FDO", dlopenNoteType, two), order: le,
			want: [][]string{{"libzstd.so.1"}, {"liblz4.so.1", "liblz4.so.2"}}},
		{name: "big endian", data: note(be, "FDO", dlopenNoteType, two), order: be,
			want: [][]string{{"libzstd.so.1"}, {"liblz4.so.1", "liblz4.so.2"}}},
		{name: "notes in a row", data: notes(note(le, "FDO", dlopenNoteType, kmod), note(le, "FDO", dlopenNoteType, two)), order: le,
			want: [][]string{{"libkmod.so.2"}, {"libzstd.so.1"}, {"liblz4.so.1", "liblz4.so.2"}}},
		{name: "a GNU note skipped", data: notes(note(le, "GNU", dlopenNoteType, `not json`), note(le, "FDO", dlopenNoteType, kmod)), order: le,
			want: [][]string{{"libkmod.so.2"}}},
		{name: "an FDO note of another type skipped", data: notes(note(le, "FDO", 0xcafe1a7e, `{"type":"deb"}`), note(le, "FDO", dlopenNoteType, kmod)), order: le,
			want: [][]string{{"libkmod.so.2"}}},
		// "FDO\0" is 4 bytes, a name of 5 is padded to 8; descriptors of every length mod 4.
		{name: "padding after name and descriptor", data: notes(
			note(le, "FDOX", dlopenNoteType, `[]`),
			note(le, "FDO", dlopenNoteType, `[{"soname":["a.so"]}]`),
			note(le, "FDO", dlopenNoteType, `[{"soname":["ab.so"]}]`),
			note(le, "FDO", dlopenNoteType, `[{"soname":["abc.so"]}]`),
			note(le, "FDO", dlopenNoteType, `[{"soname":["abcd.so"]}]`),
		), order: le, want: [][]string{{"a.so"}, {"ab.so"}, {"abc.so"}, {"abcd.so"}}},
		{name: "zeros after the last note", data: append(note(le, "FDO", dlopenNoteType, kmod), 0, 0, 0, 0), order: le,
			want: [][]string{{"libkmod.so.2"}}},
		{name: "a feature without sonames", data: note(le, "FDO", dlopenNoteType, `[{"feature":"none"}]`), order: le, want: [][]string{nil}},
		{name: "truncated descriptor", data: note(le, "FDO", dlopenNoteType, kmod)[:40], order: le, err: "truncated note"},
		{name: "truncated name", data: note(le, "FDO", dlopenNoteType, kmod)[:14], order: le, err: "truncated note"},
		{name: "truncated header", data: notes(note(le, "FDO", dlopenNoteType, kmod), []byte{4, 0, 0}), order: le, err: "truncated note header"},
		{name: "wrong byte order", data: note(le, "FDO", dlopenNoteType, kmod), order: be, err: "truncated note"},
		{name: "bad JSON", data: note(le, "FDO", dlopenNoteType, `[{"soname":`), order: le, err: "error decoding a note in .note.dlopen"},
		{name: "not an array", data: note(le, "FDO", dlopenNoteType, `{"soname":["a.so"]}`), order: le, err: "error decoding"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			got, err := parseDlopenNotes(tc.data, tc.order)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)

				return
			}

			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}
