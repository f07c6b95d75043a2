//! The `.npy` files a worker exchanges with opledger: float32 arrays in C order. The format is
//! NumPy's (`numpy.lib.format`): the magic `\x93NUMPY`, a version (1.0, 2.0 or 3.0), the
//! header's length (2 bytes little-endian in version 1, 4 in versions 2 and 3), the header — a
//! Python dict literal with `descr`, `fortran_order` and `shape`, padded with spaces and ended by
//! a newline so that the data starts at a multiple of 64 bytes — then the data. opledger writes
//! version 1.0, `<f4`, C order, and reads any version of that layout (`>f4` too, converted).

use std::io::{self, Read, Write};

const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// What a `.npy` header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The dtype, as NumPy writes it (`<f4`, `<f8`, …).
    pub descr: String,
    pub fortran_order: bool,
    pub shape: Vec<u64>,
}

/// Writes `data` as a version 1.0, little-endian float32, C-order `.npy` file of `shape`.
pub fn write(out: &mut impl Write, shape: &[u64], data: &[f32]) -> io::Result<()> {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let tuple = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {tuple}, }}");
    // Magic, version and length take 10 bytes; the newline ends the padded header.
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    let len = u16::try_from(header.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a .npy shape this long"))?;
    out.write_all(MAGIC)?;
    out.write_all(&[1, 0])?;
    out.write_all(&len.to_le_bytes())?;
    out.write_all(header.as_bytes())?;
    let mut bytes = Vec::with_capacity(data.len() * 4);
    for v in data {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    out.write_all(&bytes)
}

/// Reads the header of a `.npy` file, refusing one longer than `max_header_bytes`.
pub fn read_header(input: &mut impl Read, max_header_bytes: u64) -> Result<Header, String> {
    let mut start = [0u8; 8];
    input
        .read_exact(&mut start)
        .map_err(|_| "it does not start with the .npy magic".to_string())?;
    if &start[..6] != MAGIC {
        return Err("it does not start with the .npy magic".into());
    }
    let len = match start[6] {
        1 => {
            let mut b = [0u8; 2];
            input.read_exact(&mut b).map_err(|e| e.to_string())?;
            u64::from(u16::from_le_bytes(b))
        }
        2 | 3 => {
            let mut b = [0u8; 4];
            input.read_exact(&mut b).map_err(|e| e.to_string())?;
            u64::from(u32::from_le_bytes(b))
        }
        v => {
            return Err(format!(
                "format version {v}.{} is not one NumPy writes",
                start[7]
            ))
        }
    };
    if len > max_header_bytes {
        return Err(format!("its header is {len} bytes long"));
    }
    let mut text = vec![0u8; len as usize];
    input
        .read_exact(&mut text)
        .map_err(|_| "its header is cut short".to_string())?;
    let text = String::from_utf8(text).map_err(|_| "its header is not text".to_string())?;
    parse_header(&text)
}

/// The dict literal of a header: `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`,
/// its keys in any order.
fn parse_header(text: &str) -> Result<Header, String> {
    let body = text
        .trim()
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .ok_or("its header is not a dict")?;
    let (mut descr, mut fortran_order, mut shape) = (None, None, None);
    for entry in top_level_items(body) {
        let (key, value) = entry
            .split_once(':')
            .ok_or_else(|| format!("its header entry {entry:?} has no value"))?;
        let value = value.trim();
        match unquote(key.trim()) {
            Some("descr") => descr = unquote(value).map(str::to_string),
            Some("fortran_order") => {
                fortran_order = match value {
                    "True" => Some(true),
                    "False" => Some(false),
                    _ => return Err(format!("its fortran_order is {value}")),
                }
            }
            Some("shape") => shape = Some(parse_shape(value)?),
            _ => return Err(format!("its header has the unknown entry {entry:?}")),
        }
    }
    Ok(Header {
        descr: descr.ok_or("its header has no descr")?,
        fortran_order: fortran_order.ok_or("its header has no fortran_order")?,
        shape: shape.ok_or("its header has no shape")?,
    })
}

/// The comma-separated items of a dict or tuple body, commas inside parentheses kept.
fn top_level_items(body: &str) -> Vec<&str> {
    let (mut depth, mut start, mut items) = (0i32, 0, Vec::new());
    for (i, c) in body.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&body[start..]);
    items.into_iter().filter(|s| !s.trim().is_empty()).collect()
}

fn unquote(s: &str) -> Option<&str> {
    s.strip_prefix('\'')
        .and_then(|t| t.strip_suffix('\''))
        .or_else(|| s.strip_prefix('"').and_then(|t| t.strip_suffix('"')))
}

/// `(2, 3)`, `(5,)` or `()`.
fn parse_shape(value: &str) -> Result<Vec<u64>, String> {
    let inner = value
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .ok_or_else(|| format!("its shape {value} is not a tuple"))?;
    top_level_items(inner)
        .into_iter()
        .map(|d| {
            let d = d.trim().trim_end_matches('L');
            d.parse::<u64>()
                .map_err(|_| format!("its shape {value} is not a tuple of sizes"))
        })
        .collect()
}

/// The `n` float32 values after a header of dtype `descr` (`<f4` or `>f4`).
pub fn read_f32(input: &mut impl Read, descr: &str, n: usize) -> io::Result<Vec<f32>> {
    let big_endian = descr == ">f4";
    let mut bytes = vec![0u8; n * 4];
    input.read_exact(&mut bytes)?;
    Ok(bytes
        .chunks_exact(4)
        .map(|b| {
            let b = [b[0], b[1], b[2], b[3]];
            if big_endian {
                f32::from_be_bytes(b)
            } else {
                f32::from_le_bytes(b)
            }
        })
        .collect())
}

/// Whether `descr` is float32 in either byte order.
pub fn is_f32(descr: &str) -> bool {
    matches!(descr, "<f4" | ">f4")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_file_reads_back_with_its_shape_and_values() {
        for shape in [vec![2u64, 3], vec![5], vec![2, 1, 4]] {
            let n: u64 = shape.iter().product();
            let data: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 1.0).collect();
            let mut file = Vec::new();
            write(&mut file, &shape, &data).unwrap();
            // The data starts at a multiple of 64 bytes, as NumPy aligns it.
            assert_eq!((file.len() - data.len() * 4) % 64, 0);
            let mut r = &file[..];
            let h = read_header(&mut r, 1 << 16).unwrap();
            assert_eq!(
                h,
                Header {
                    descr: "<f4".into(),
                    fortran_order: false,
                    shape: shape.clone()
                }
            );
            assert_eq!(read_f32(&mut r, &h.descr, n as usize).unwrap(), data);
        }
    }

    #[test]
    fn what_numpy_writes_is_read_byte_for_byte() {
        // `numpy.save(f, numpy.arange(6, dtype='<f4').reshape(2, 3))` with NumPy 2.
        let mut file = b"\x93NUMPY\x01\x00v\x00".to_vec();
        let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
        file.extend_from_slice(header.as_bytes());
        file.extend(std::iter::repeat_n(b' ', 118 - header.len() - 1));
        file.push(b'\n');
        let mut mine = Vec::new();
        write(&mut mine, &[2, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
        assert_eq!(&mine[..128], &file[..]);
    }

    #[test]
    fn other_dtypes_orders_versions_and_damaged_headers_are_told_apart() {
        let h = parse_header("{'shape': (128,), 'fortran_order': True, 'descr': '<f8', }").unwrap();
        assert_eq!(h.descr, "<f8");
        assert!(h.fortran_order);
        assert_eq!(h.shape, vec![128]);
        assert!(!is_f32(&h.descr));
        assert_eq!(
            parse_header("{'descr': '<f4', 'fortran_order': False, 'shape': (), }")
                .unwrap()
                .shape,
            Vec::<u64>::new()
        );
        for bad in [
            "",
            "{'descr': '<f4'}",
            "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, x)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}",
        ] {
            assert!(parse_header(bad).is_err(), "{bad:?}");
        }
        let mut r = &b"\x93NUMPX\x01\x00"[..];
        assert!(read_header(&mut r, 1 << 16).is_err());
        let mut r = &b"\x93NUMPY\x02\x00\xff\xff\xff\x7f"[..];
        assert_eq!(
            read_header(&mut r, 1 << 16).unwrap_err(),
            "its header is 2147483647 bytes long"
        );
    }

    #[test]
    fn big_endian_float32_is_converted() {
        let mut r = &[0x3f, 0x80, 0, 0, 0x40, 0, 0, 0][..];
        assert_eq!(read_f32(&mut r, ">f4", 2).unwrap(), vec![1.0, 2.0]);
    }
}
