//! Tables on a terminal: columns as wide as their widest cell (comfy-table),
//! no borders, two spaces between columns, numbers aligned right.

use comfy_table::{CellAlignment, ContentArrangement, Table, presets::NOTHING};

/// Prints `rows` under `header`; the columns whose index is in `right`
/// (counts) are aligned right. Nothing is wrapped or cut: a long ID widens
/// its column instead of shifting the next.
pub(crate) fn print_table(header: &[&str], right: &[usize], rows: Vec<Vec<String>>) {
    println!("{}", render(header, right, rows));
}

fn render(header: &[&str], right: &[usize], rows: Vec<Vec<String>>) -> String {
    let mut table = Table::new();
    table
        .load_preset(NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header.iter().map(|h| h.to_uppercase()))
        .add_rows(rows);
    for (i, column) in table.column_iter_mut().enumerate() {
        column.set_padding((0, 2));
        if right.contains(&i) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    table.trim_fmt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_fit_their_widest_cell() {
        let long = "nightly:2026-12-05T00:00:00Z";
        let text = render(
            &["run", "chunks"],
            &[1],
            vec![vec!["a".into(), "3".into()], vec![long.into(), "12".into()]],
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], format!("{:<w$}  CHUNKS", "RUN", w = long.len()));
        assert_eq!(lines[1], format!("{:<w$}       3", "a", w = long.len()));
        assert_eq!(lines[2], format!("{long}      12"));
    }
}
