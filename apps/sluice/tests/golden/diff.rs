//! A small unified diff of two texts, line by line, for the message of a golden file
//! that differs: a longest-common-subsequence table (golden files are at most a few
//! hundred lines, so the quadratic table is cheap), then hunks with three lines of
//! context, as `diff -u` prints them.

/// Lines of unchanged context around each change.
const CONTEXT: usize = 3;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Edit {
    Same,
    Removed,
    Added,
}

/// `expected` against `actual` in unified diff format, headed `--- old_name` and
/// `+++ new_name`. A trailing space or tab, which would not show, is marked with `·`
/// or `→` after it.
pub fn unified(expected: &str, actual: &str, old_name: &str, new_name: &str) -> String {
    let old: Vec<&str> = expected.split_inclusive('\n').collect();
    let new: Vec<&str> = actual.split_inclusive('\n').collect();
    let script = edit_script(&old, &new);
    let mut out = format!("--- {old_name}\n+++ {new_name}\n");
    // Positions (old line, new line) before each entry of the script.
    let mut positions = Vec::with_capacity(script.len() + 1);
    let (mut old_line, mut new_line) = (0, 0);
    for (edit, _) in &script {
        positions.push((old_line, new_line));
        match edit {
            Edit::Same => {
                old_line += 1;
                new_line += 1;
            }
            Edit::Removed => old_line += 1,
            Edit::Added => new_line += 1,
        }
    }
    positions.push((old_line, new_line));
    let changed: Vec<usize> = (0..script.len()).filter(|&index| script[index].0 != Edit::Same).collect();
    let mut index = 0;
    while index < changed.len() {
        // One hunk: changes closer than twice the context join it.
        let start = changed[index].saturating_sub(CONTEXT);
        let mut last = changed[index];
        while index + 1 < changed.len() && changed[index + 1] <= last + 2 * CONTEXT + 1 {
            index += 1;
            last = changed[index];
        }
        let end = (last + CONTEXT + 1).min(script.len());
        let (old_start, new_start) = positions[start];
        let (old_end, new_end) = positions[end];
        out.push_str(&format!(
            "@@ -{},{} +{},{} @@\n",
            old_start + 1,
            old_end - old_start,
            new_start + 1,
            new_end - new_start
        ));
        for (edit, line) in &script[start..end] {
            let sign = match edit {
                Edit::Same => ' ',
                Edit::Removed => '-',
                Edit::Added => '+',
            };
            out.push(sign);
            out.push_str(&visible(line));
        }
        index += 1;
    }
    out
}

/// The line with its newline (added when missing, with a note) and with a trailing
/// space or tab made visible.
fn visible(line: &str) -> String {
    let (body, newline) = match line.strip_suffix('\n') {
        Some(body) => (body, ""),
        None => (line, " (no newline at the end)"),
    };
    let mut text = body.to_string();
    if text.ends_with(' ') {
        text.push('·');
    } else if text.ends_with('\t') {
        text.push('→');
    }
    format!("{text}{newline}\n")
}

/// The shortest edit script from `old` to `new` through their longest common
/// subsequence.
fn edit_script<'a>(old: &[&'a str], new: &[&'a str]) -> Vec<(Edit, &'a str)> {
    let (rows, columns) = (old.len(), new.len());
    // common[i][j]: the LCS length of old[i..] and new[j..].
    let mut common = vec![vec![0u32; columns + 1]; rows + 1];
    for i in (0..rows).rev() {
        for j in (0..columns).rev() {
            common[i][j] =
                if old[i] == new[j] { common[i + 1][j + 1] + 1 } else { common[i + 1][j].max(common[i][j + 1]) };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut script = Vec::new();
    while i < rows || j < columns {
        if i < rows && j < columns && old[i] == new[j] {
            script.push((Edit::Same, old[i]));
            i += 1;
            j += 1;
        } else if i < rows && (j == columns || common[i + 1][j] >= common[i][j + 1]) {
            // Removals before additions, as diff -u shows a changed line.
            script.push((Edit::Removed, old[i]));
            i += 1;
        } else {
            script.push((Edit::Added, new[j]));
            j += 1;
        }
    }
    script
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_line_shows_with_its_context() {
        let old = "a\nb\nc\nd\ne\nf\ng\nh\n";
        let new = "a\nb\nc\nd\nE\nf\ng\nh\n";
        let diff = unified(old, new, "golden", "actual");
        assert_eq!(diff, "--- golden\n+++ actual\n@@ -2,7 +2,7 @@\n b\n c\n d\n-e\n+E\n f\n g\n h\n");
        assert_eq!(unified(old, old, "golden", "actual"), "--- golden\n+++ actual\n");
        let diff = unified("x \n", "x\n", "golden", "actual");
        assert!(diff.contains("-x ·\n+x\n"), "{diff}");
    }
}
