//! What a synthetic turn is about (customer, order, sums) and the text its attempts stream,
//! cut into fragments on character boundaries.

use super::*;

/// What one turn is about: every attempt of it talks about the same customer, order and sums.
#[derive(Debug, Clone)]
pub(super) struct Scenario {
    pub(super) customer: usize,
    pub(super) order: u32,
    pub(super) amount_cents: u32,
    pub(super) currency: usize,
    pub(super) product: usize,
    pub(super) days: u32,
    pub(super) case: u32,
    pub(super) opening: usize,
}

pub(super) const CUSTOMERS: [(&str, &str); 12] = [
    ("Zoë", "zoe.martin@example.com"),
    ("José", "jose.alvarez@example.org"),
    ("Björn", "bjorn.eriksson@example.se"),
    ("Siobhán", "siobhan.kelly@example.ie"),
    ("Łukasz", "lukasz.wojcik@example.pl"),
    ("Mei", "mei.chen@example.com"),
    ("Priya", "priya.raman@example.in"),
    ("Ngozi", "ngozi.okafor@example.ng"),
    ("Tom", "tom@example.com"),
    ("Ana", "ana.souza@example.br"),
    ("Kenji", "kenji.tanaka@example.jp"),
    ("Fatima", "fatima.zahra@example.ma"),
];

/// (symbol, ISO code).
pub(super) const CURRENCIES: [(&str, &str); 3] = [("$", "USD"), ("€", "EUR"), ("£", "GBP")];

pub(super) const PRODUCTS: [&str; 9] = [
    "\"The Left Hand of Darkness\" (hardcover)",
    "\"Cien años de soledad\"",
    "the café au lait mug",
    "\"ノルウェイの森\" (paperback)",
    "a 3-pack of A5 notebooks",
    "\"Der Zauberberg\"",
    "the bookmark set",
    "\"L’Étranger\" (pocket edition)",
    "your e-reader sleeve",
];

pub(super) const KB_QUERIES: [&str; 4] = [
    "return policy damaged items",
    "refund timeline gift card",
    "international shipping customs",
    "cancel subscription mid-cycle",
];

pub(super) const CASE_NOTES: [&str; 5] = [
    "customer reports damaged spine",
    "refund requested via chat",
    "asked for \"priority\" handling",
    "courier lost parcel — reorder",
    "Retoure angefragt (Kunde in München)",
];

pub(super) const OPENINGS: [&str; 8] = [
    "Thanks for your patience, {name}. ",
    "Hi {name}, I looked into order {order}. ",
    "Checking order {order} now. ",
    "Sorry about the trouble with {product}. ",
    "Hello {name} — thanks for reaching out. ",
    "Let me check what happened with {order}. ",
    "Good news, {name}: I found your order. ",
    "I understand, {name}. Let’s sort this out. ",
];

pub(super) const BODY: [&str; 31] = [
    "The order shipped on the 4th and was marked delivered {days} days later. ",
    "Our records show {product} left the warehouse in good condition. ",
    "I can see the payment of {amount} was captured twice, so one charge will be reversed. ",
    "A full refund of {amount} has been requested and should reach your card within 5–7 business days. ",
    "I have attached a prepaid return label to case {case}. ",
    "Please keep the original packaging until the courier collects the parcel. ",
    "The courier notes say: \"left at front door, no signature\". ",
    "If the item arrived damaged, a photo of the box helps us claim it from the carrier. ",
    "Your subscription renews on the 1st; cancelling now keeps access until then. ",
    "I checked the knowledge base article on returns (policy v3.2). ",
    "Items bought during the sale can be returned within {days} days. ",
    "The replacement will ship from our Köln warehouse tomorrow morning. ",
    "I’ve updated case {case} with these details so any colleague can pick it up. ",
    "You will get a confirmation email at {email} shortly. ",
    "Tracking currently shows the parcel \"in transit\" at the regional hub. ",
    "Unfortunately {product} is out of stock until next month. ",
    "We can offer a store credit of {amount} instead, if you prefer. ",
    "There is no fee for the exchange. ",
    "I’ve flagged this for our billing team with priority \"high\". ",
    "The invoice for {order} lists 2 items; one is still on back-order. ",
    "Note: refunds to gift cards can take up to {days} days. ✓ ",
    "For reference, the file is stored under returns\\2026\\{case}. ",
    "The warehouse team in Zürich confirmed the package weight matched the invoice. ",
    "Here is what happens next:\n- the carrier picks up the parcel\n- we inspect it\n- the refund is released\n",
    "Summary:\n1. refund {amount}\n2. return label for {order}\n",
    "Your order contained {product} and a gift note reading \"Happy birthday! 🎉\". ",
    "ご不便をおかけして申し訳ありません。",
    "Merci pour votre patience — nous traitons la demande. ",
    "The delivery address on file ends in “Straße 12”. ",
    "I could not find a second order under {email}. ",
    "Shipping to Norway adds 2–3 days because of customs. ",
];

pub(super) const CLOSINGS: [&str; 5] = [
    "Is there anything else I can help with?",
    "Let me know if you have any other questions, {name}.",
    "Thanks again for shopping with us!",
    "I’ll keep the case open for another {days} days.",
    "Have a great day 🙂",
];

impl Scenario {
    pub(super) fn draw(rng: &mut Rng) -> Self {
        Scenario {
            customer: rng.below(CUSTOMERS.len()),
            order: rng.range(1_000, 99_999) as u32,
            amount_cents: rng.range(499, 25_000) as u32,
            currency: rng.below(CURRENCIES.len()),
            product: rng.below(PRODUCTS.len()),
            days: rng.range(2, 30) as u32,
            case: rng.range(10_000, 99_999) as u32,
            opening: rng.below(OPENINGS.len()),
        }
    }

    /// Compose one attempt's answer of about `target` bytes into `out`. Retries often open
    /// the same way as the first attempt and then say things a little differently.
    pub(super) fn compose(&self, rng: &mut Rng, attempt: u32, target: usize, out: &mut String) {
        out.clear();
        let opening = if attempt == 0 || rng.chance(0.6) {
            self.opening
        } else {
            rng.below(OPENINGS.len())
        };
        self.expand(OPENINGS[opening], out);
        let closing = CLOSINGS[rng.below(CLOSINGS.len())];
        while out.len() + closing.len() < target {
            if rng.chance(0.06) {
                out.push_str("\n\n");
            }
            self.expand(BODY[rng.below(BODY.len())], out);
        }
        self.expand(closing, out);
    }

    pub(super) fn expand(&self, template: &str, out: &mut String) {
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            let Some(close) = after.find('}') else {
                out.push_str(&rest[open..]);
                return;
            };
            match &after[..close] {
                "name" => out.push_str(CUSTOMERS[self.customer].0),
                "email" => out.push_str(CUSTOMERS[self.customer].1),
                "order" => {
                    let _ = write!(out, "ORD-{}", self.order);
                }
                "amount" => {
                    let _ = write!(
                        out,
                        "{}{}.{:02}",
                        CURRENCIES[self.currency].0,
                        self.amount_cents / 100,
                        self.amount_cents % 100
                    );
                }
                "product" => out.push_str(PRODUCTS[self.product]),
                "days" => {
                    let _ = write!(out, "{}", self.days);
                }
                "case" => {
                    let _ = write!(out, "CASE-{}", self.case);
                }
                other => {
                    out.push('{');
                    out.push_str(other);
                    out.push('}');
                }
            }
            rest = &after[close + 1..];
        }
        out.push_str(rest);
    }
}

/// Cut `text` into about `n` fragments of similar length (streams split words anywhere, but
/// never inside a character).
pub(super) fn cut_fragments(rng: &mut Rng, text: &str, n: usize, cuts: &mut Vec<(usize, usize)>) {
    cuts.clear();
    let len = text.len();
    if len == 0 {
        return;
    }
    let n = n.clamp(1, len);
    let jitter = (len / n / 3) as i64;
    let mut prev = 0;
    for j in 1..n {
        let ideal = (j * len / n) as i64 + rng.range(-jitter, jitter);
        let mut pos = usize::try_from(ideal).unwrap_or(0).clamp(prev + 1, len);
        while pos < len && !text.is_char_boundary(pos) {
            pos += 1;
        }
        if pos >= len {
            break;
        }
        cuts.push((prev, pos));
        prev = pos;
    }
    cuts.push((prev, len));
}
