//! Pages of ListVolumes and ListSnapshots: CSI's `starting_token`, `max_entries` and
//! `next_token`. A token is the index of the page's first entry in the full list,
//! which the driver lists afresh each call (it keeps no state between calls).

use std::ops::Range;

use tonic::Status;

/// One page: which entries of the full list, and the token of the next page (empty
/// after the last).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Page {
    pub(crate) entries: Range<usize>,
    pub(crate) next_token: String,
}

/// The page `starting_token` and `max_entries` (0: all the rest) ask for, of a list
/// of `length` `items` ("volumes", "snapshots") that `call` ("ListVolumes") made.
/// A token that is not a number is ABORTED, as CSI asks; so is one past the end (the
/// list shrank since the last page).
pub(crate) fn page(
    starting_token: &str,
    max_entries: i32,
    length: usize,
    call: &str,
    items: &str,
) -> Result<Page, Status> {
    let start: usize = if starting_token.is_empty() {
        0
    } else {
        starting_token.parse().map_err(|_| Status::aborted(format!("starting_token: not a token {call} gave")))?
    };
    if start > length {
        return Err(Status::aborted(format!("starting_token: past the end of the list ({items} were deleted)")));
    }
    let count = match usize::try_from(max_entries) {
        Ok(0) => length - start,
        Ok(count) => count.min(length - start),
        Err(_) => return Err(Status::invalid_argument("max_entries: negative")),
    };
    let end = start + count;
    let next_token = if end < length { end.to_string() } else { String::new() };
    Ok(Page { entries: start..end, next_token })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn bad_tokens_and_negative_sizes_are_refused() {
        let code = |token: &str, max: i32| page(token, max, 3, "ListVolumes", "volumes").unwrap_err().code();
        assert_eq!(code("x", 0), tonic::Code::Aborted);
        assert_eq!(code("4", 0), tonic::Code::Aborted);
        assert_eq!(code("-1", 0), tonic::Code::Aborted);
        assert_eq!(code("", -1), tonic::Code::InvalidArgument);
        assert_eq!(
            page("3", 0, 3, "ListVolumes", "volumes").unwrap(),
            Page { entries: 3..3, next_token: String::new() }
        );
    }

    proptest! {
        /// Following next_token from the first page visits every entry once, in
        /// order, with no page larger than asked.
        #[test]
        fn pages_cover_the_list_once(length in 0usize..50, max_entries in 0i32..8) {
            let mut token = String::new();
            let mut seen = Vec::new();
            for _ in 0..=length {
                let page = page(&token, max_entries, length, "ListVolumes", "volumes").unwrap();
                if max_entries > 0 {
                    prop_assert!(page.entries.len() <= max_entries as usize);
                }
                seen.extend(page.entries.clone());
                token = page.next_token;
                if token.is_empty() {
                    break;
                }
            }
            prop_assert!(token.is_empty());
            prop_assert_eq!(seen, (0..length).collect::<Vec<_>>());
        }
    }
}
