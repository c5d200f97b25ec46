//! Parsing sizes and zone descriptions given on the command line.

use mmkit_core::page_alloc::{NodeId, ZoneType};
use mmkit_core::topology::ZoneSize;

/// A byte size with an optional K, M or G suffix (powers of 1024), as sysfs prints cache
/// sizes ("266240K").
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (digits, shift) = match text.char_indices().last() {
        Some((i, 'K' | 'k')) => (&text[..i], 10),
        Some((i, 'M' | 'm')) => (&text[..i], 20),
        Some((i, 'G' | 'g')) => (&text[..i], 30),
        _ => (text, 0),
    };
    let value: i64 = digits
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a size (a number with an optional K, M or G)"))?;
    let value = u64::try_from(value).map_err(|_| format!("size {text:?} is negative"))?;
    value
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("size {text:?} is too large"))
}

/// A zone argument: `[NODE:]NAME=MANAGED[/PRESENT[/SPANNED]]`, sizes in 4 KiB pages.
pub fn parse_zone(text: &str) -> Result<ZoneSize, String> {
    let usage = || format!("zone {text:?}: expected [NODE:]NAME=MANAGED[/PRESENT[/SPANNED]]");
    let (name, sizes) = text.split_once('=').ok_or_else(usage)?;
    let (node, name) = match name.split_once(':') {
        Some((node, name)) => {
            let node: NodeId = node
                .trim()
                .parse()
                .map_err(|_| format!("zone {text:?}: bad node {node:?}"))?;
            (node, name)
        }
        None => (0, name),
    };
    let zone_type = ZoneType::from_name(name.trim()).ok_or_else(|| {
        format!("zone {text:?}: unknown zone {name:?} (DMA, DMA32, Normal, Movable)")
    })?;
    let pages: Vec<u64> = sizes
        .split('/')
        .map(|p| parse_pages(text, p))
        .collect::<Result<_, _>>()?;
    let (managed, present, spanned) = match pages[..] {
        [m] => (m, m, m),
        [m, p] => (m, p, p),
        [m, p, s] => (m, p, s),
        _ => return Err(usage()),
    };
    Ok(ZoneSize {
        node,
        zone_type,
        managed,
        present,
        spanned,
    })
}

fn parse_pages(zone: &str, text: &str) -> Result<u64, String> {
    let value: i64 = text
        .trim()
        .parse()
        .map_err(|_| format!("zone {zone:?}: {text:?} is not a page count"))?;
    u64::try_from(value).map_err(|_| format!("zone {zone:?}: page count {value} is negative"))
}

/// A physical address range as the kernel prints e820 entries and `/proc/iomem` lines:
/// `START-END`, both inclusive, hexadecimal with `0x` or decimal (a size suffix is allowed
/// too), optionally `@NODE`. Returns the first byte, one past the last, and the node.
pub fn parse_address_range(text: &str) -> Result<(u64, u64, Option<NodeId>), String> {
    let usage = || format!("{text:?}: expected START-END[@NODE] (inclusive, as /proc/iomem)");
    let (range, node) = match text.split_once('@') {
        Some((range, node)) => {
            let node: NodeId = node
                .trim()
                .parse()
                .map_err(|_| format!("{text:?}: bad node {node:?}"))?;
            (range, Some(node))
        }
        None => (text, None),
    };
    let (start, last) = range.split_once('-').ok_or_else(usage)?;
    let (start, last) = (parse_address(text, start)?, parse_address(text, last)?);
    if last < start {
        return Err(format!("{text:?}: ends before it starts"));
    }
    let end = last
        .checked_add(1)
        .ok_or_else(|| format!("{text:?}: ends beyond the address space"))?;
    Ok((start, end, node))
}

fn parse_address(range: &str, text: &str) -> Result<u64, String> {
    let text = text.trim();
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16)
            .map_err(|_| format!("{range:?}: {text:?} is not a hexadecimal address")),
        None => parse_bytes(text).map_err(|e| format!("{range:?}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_ranges_are_inclusive_as_iomem_prints_them() {
        assert_eq!(
            parse_address_range("0x1000-0x9fbff"),
            Ok((0x1000, 0x9_fc00, None))
        );
        assert_eq!(
            parse_address_range("4G-5G@1"),
            Ok((4 << 30, (5 << 30) + 1, Some(1)))
        );
        assert!(parse_address_range("0x2000-0x1000").is_err());
        assert!(parse_address_range("0x1000").is_err());
        assert!(parse_address_range("0x1000-0xzz").is_err());
        assert!(parse_address_range("0-0xffffffffffffffff").is_err());
    }

    #[test]
    fn bytes_take_binary_suffixes() {
        assert_eq!(parse_bytes("266240K"), Ok(266_240 * 1024));
        assert_eq!(parse_bytes("32M"), Ok(32 << 20));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert!(parse_bytes("-1K").is_err());
        assert!(parse_bytes("lots").is_err());
    }

    #[test]
    fn zones_take_node_and_sizes() {
        let zone = parse_zone("1:Normal=100/200/300").unwrap();
        assert_eq!((zone.node, zone.zone_type), (1, ZoneType::Normal));
        assert_eq!((zone.managed, zone.present, zone.spanned), (100, 200, 300));
        let dma = parse_zone("dma=3840").unwrap();
        assert_eq!(
            (dma.node, dma.zone_type, dma.spanned),
            (0, ZoneType::Dma, 3840)
        );
        assert!(parse_zone("Normal=-5").unwrap_err().contains("negative"));
        assert!(parse_zone("Highmem=5").is_err());
        assert!(parse_zone("Normal").is_err());
    }
}
