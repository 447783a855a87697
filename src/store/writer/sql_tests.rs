use super::*;

#[test]
fn a_values_statement_numbers_its_placeholders_in_order() {
    assert_eq!(
        values_statement(
            Placeholders::Numbered,
            "INSERT INTO t (a, b) ",
            2,
            2,
            " RETURNING a"
        ),
        "INSERT INTO t (a, b) VALUES ($1, $2), ($3, $4) RETURNING a"
    );
    assert_eq!(
        values_statement(Placeholders::Positional, "INSERT INTO t (a) ", 3, 1, ""),
        "INSERT INTO t (a) VALUES (?), (?), (?)"
    );
}

#[test]
fn rows_are_cut_in_powers_of_two_up_to_the_most_per_statement() {
    let lengths = |n: usize| -> Vec<usize> {
        let rows = vec![0u8; n];
        chunks(&rows).map(<[u8]>::len).collect()
    };
    assert_eq!(lengths(0), Vec::<usize>::new());
    assert_eq!(lengths(1), [1]);
    assert_eq!(lengths(7), [4, 2, 1]);
    assert_eq!(lengths(200), [128, 64, 8]);
    assert_eq!(lengths(600), [256, 256, 64, 16, 8]);
}
