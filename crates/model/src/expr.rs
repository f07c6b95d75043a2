//! The spec's small integer expression language, for sizes written in terms of a spec's own keys
//! (`2 * cols`, `ceil_div(rows * cols, 1024)`): whole numbers, `+ - * /` (`/` rounds down),
//! parentheses, `ceil_div(a, b)`, `min(a, b, …)`, `max(a, b, …)` and names. No general-purpose
//! evaluator: nothing else parses, and every value is checked for overflow.

use std::collections::BTreeMap;

/// A parsed expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Int(i64),
    Name(String),
    Add(Box<Expr>, Box<Expr>),
    Sub(Box<Expr>, Box<Expr>),
    Mul(Box<Expr>, Box<Expr>),
    Div(Box<Expr>, Box<Expr>),
    Call(Func, Vec<Expr>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Func {
    CeilDiv,
    Min,
    Max,
}

/// Longest expression accepted, in characters (a size, not a program).
const MAX_LEN: usize = 256;
/// Deepest nesting of parentheses and calls.
const MAX_DEPTH: usize = 16;

impl Expr {
    /// Parses `text`; the error says what was expected and where (a character offset).
    pub fn parse(text: &str) -> Result<Expr, String> {
        if text.len() > MAX_LEN {
            return Err(format!(
                "expression of {} characters: at most {MAX_LEN}",
                text.len()
            ));
        }
        let mut p = Parser {
            s: text.as_bytes(),
            i: 0,
            depth: 0,
        };
        let e = p.sum()?;
        p.space();
        if p.i < p.s.len() {
            return Err(format!(
                "unexpected `{}` at character {} of {text:?}",
                p.s[p.i] as char,
                p.i + 1
            ));
        }
        Ok(e)
    }

    /// The names the expression uses.
    pub fn names(&self) -> Vec<&str> {
        let mut out = Vec::new();
        self.walk(&mut |e| {
            if let Expr::Name(n) = e {
                out.push(n.as_str());
            }
        });
        out
    }

    fn walk<'a>(&'a self, f: &mut impl FnMut(&'a Expr)) {
        f(self);
        match self {
            Expr::Add(a, b) | Expr::Sub(a, b) | Expr::Mul(a, b) | Expr::Div(a, b) => {
                a.walk(f);
                b.walk(f);
            }
            Expr::Call(_, args) => args.iter().for_each(|a| a.walk(f)),
            Expr::Int(_) | Expr::Name(_) => {}
        }
    }

    /// The value with `names` bound; an unknown name, a division by zero or an overflow is an
    /// error.
    pub fn eval(&self, names: &BTreeMap<String, i64>) -> Result<i64, String> {
        let over = || "the value overflows 64 bits".to_string();
        Ok(match self {
            Expr::Int(v) => *v,
            Expr::Name(n) => *names.get(n).ok_or_else(|| {
                format!(
                    "unknown name `{n}`; known: {}",
                    names.keys().cloned().collect::<Vec<_>>().join(", ")
                )
            })?,
            Expr::Add(a, b) => a
                .eval(names)?
                .checked_add(b.eval(names)?)
                .ok_or_else(over)?,
            Expr::Sub(a, b) => a
                .eval(names)?
                .checked_sub(b.eval(names)?)
                .ok_or_else(over)?,
            Expr::Mul(a, b) => a
                .eval(names)?
                .checked_mul(b.eval(names)?)
                .ok_or_else(over)?,
            Expr::Div(a, b) => {
                let d = b.eval(names)?;
                if d == 0 {
                    return Err("division by zero".into());
                }
                a.eval(names)?.div_euclid(d)
            }
            Expr::Call(f, args) => {
                let v = args
                    .iter()
                    .map(|a| a.eval(names))
                    .collect::<Result<Vec<i64>, String>>()?;
                match f {
                    Func::CeilDiv => {
                        if v[1] <= 0 {
                            return Err("ceil_div by a divisor <= 0".into());
                        }
                        v[0].checked_add(v[1] - 1)
                            .ok_or_else(over)?
                            .div_euclid(v[1])
                    }
                    Func::Min => v.iter().copied().min().unwrap_or(0),
                    Func::Max => v.iter().copied().max().unwrap_or(0),
                }
            }
        })
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    depth: usize,
}

impl Parser<'_> {
    fn space(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.space();
        self.s.get(self.i).copied()
    }

    fn sum(&mut self) -> Result<Expr, String> {
        let mut e = self.product()?;
        while let Some(c @ (b'+' | b'-')) = self.peek() {
            self.i += 1;
            let r = self.product()?;
            e = if c == b'+' {
                Expr::Add(Box::new(e), Box::new(r))
            } else {
                Expr::Sub(Box::new(e), Box::new(r))
            };
        }
        Ok(e)
    }

    fn product(&mut self) -> Result<Expr, String> {
        let mut e = self.atom()?;
        while let Some(c @ (b'*' | b'/')) = self.peek() {
            self.i += 1;
            let r = self.atom()?;
            e = if c == b'*' {
                Expr::Mul(Box::new(e), Box::new(r))
            } else {
                Expr::Div(Box::new(e), Box::new(r))
            };
        }
        Ok(e)
    }

    fn atom(&mut self) -> Result<Expr, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!("nested deeper than {MAX_DEPTH}"));
        }
        let e = self.atom_inner();
        self.depth -= 1;
        e
    }

    fn atom_inner(&mut self) -> Result<Expr, String> {
        let at = self.i + 1;
        match self.peek() {
            Some(b'(') => {
                self.i += 1;
                let e = self.sum()?;
                self.expect(b')')?;
                Ok(e)
            }
            Some(c) if c.is_ascii_digit() => {
                let start = self.i;
                while self.i < self.s.len() && self.s[self.i].is_ascii_digit() {
                    self.i += 1;
                }
                let digits = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
                digits
                    .parse::<i64>()
                    .map(Expr::Int)
                    .map_err(|_| format!("number {digits} at character {at} is too large"))
            }
            Some(c) if c.is_ascii_alphabetic() || c == b'_' => {
                let start = self.i;
                while self.i < self.s.len()
                    && (self.s[self.i].is_ascii_alphanumeric() || self.s[self.i] == b'_')
                {
                    self.i += 1;
                }
                let name = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
                if self.peek() != Some(b'(') {
                    return Ok(Expr::Name(name));
                }
                let f = match name.as_str() {
                    "ceil_div" => Func::CeilDiv,
                    "min" => Func::Min,
                    "max" => Func::Max,
                    _ => {
                        return Err(format!(
                            "unknown function `{name}` at character {at}; expected ceil_div, min or max"
                        ))
                    }
                };
                self.i += 1;
                let mut args = vec![self.sum()?];
                while self.peek() == Some(b',') {
                    self.i += 1;
                    args.push(self.sum()?);
                }
                self.expect(b')')?;
                if f == Func::CeilDiv && args.len() != 2 {
                    return Err(format!(
                        "ceil_div takes 2 arguments, not {} (at character {at})",
                        args.len()
                    ));
                }
                Ok(Expr::Call(f, args))
            }
            Some(c) => Err(format!(
                "unexpected `{}` at character {at}: expected a number, a name, a function or `(`",
                c as char
            )),
            None => Err("the expression ends where a number, a name or `(` was expected".into()),
        }
    }

    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(format!(
                "expected `{}` at character {}",
                c as char,
                self.i + 1
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(text: &str) -> Result<i64, String> {
        let names: BTreeMap<String, i64> = [("rows".to_string(), 8), ("cols".to_string(), 1000)]
            .into_iter()
            .collect();
        Expr::parse(text)?.eval(&names)
    }

    #[test]
    fn integers_names_operators_and_functions() {
        assert_eq!(eval("2 * cols"), Ok(2000));
        assert_eq!(eval("rows*cols + 1"), Ok(8001));
        assert_eq!(eval("(rows + 2) * 3 - 1"), Ok(29));
        assert_eq!(eval("cols / 3"), Ok(333));
        assert_eq!(eval("ceil_div(rows * cols, 1024)"), Ok(8));
        assert_eq!(eval("min(rows, cols, 5)"), Ok(5));
        assert_eq!(eval("max(rows, 2 * rows)"), Ok(16));
        assert_eq!(
            Expr::parse("a * ceil_div(b, c)").unwrap().names(),
            ["a", "b", "c"]
        );
    }

    #[test]
    fn every_error_says_what_and_where() {
        assert!(eval("rows +").unwrap_err().contains("ends where a number"));
        assert!(eval("rows ^ 2")
            .unwrap_err()
            .contains("unexpected `^` at character 6"));
        assert!(eval("pow(rows, 2)")
            .unwrap_err()
            .contains("unknown function `pow`"));
        assert!(eval("ceil_div(rows)")
            .unwrap_err()
            .contains("takes 2 arguments"));
        assert!(eval("depth")
            .unwrap_err()
            .contains("unknown name `depth`; known: cols, rows"));
        assert!(eval("rows / (cols - 1000)")
            .unwrap_err()
            .contains("division by zero"));
        assert!(eval("9223372036854775807 * 2")
            .unwrap_err()
            .contains("overflows"));
        assert!(eval("99999999999999999999")
            .unwrap_err()
            .contains("too large"));
        let deep = format!("{}1{}", "(".repeat(40), ")".repeat(40));
        assert!(eval(&deep).unwrap_err().contains("nested deeper"));
        assert!(Expr::parse(&"1+".repeat(200))
            .unwrap_err()
            .contains("at most 256"));
    }
}
