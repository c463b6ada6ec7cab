"""Deterministic generation of the sample campus world.

Everything is drawn from :class:`random.Random` instances seeded from ``seed`` alone (no
global random state, no clock), so ``generate(n, seed)`` is the same world on every
machine and every run. Each part of the world (space, departments, people, ...) draws
from its own stream, so growing one part does not reshuffle the others.

Longer than 400 lines for a reason: most of it is the world's data -- each table's columns,
the name lists and the weights of every distribution -- which reads best beside the one
function that draws from it.
"""

from __future__ import annotations

import random
import re
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, date, datetime, timedelta
from typing import ClassVar

Value = int | str | date | datetime | None
Row = tuple[Value, ...]

# Insert columns per table, in row order. Defaulted housekeeping columns (updated_at) and
# identity keys are left out so the database fills them; timestamps that carry meaning
# (merged_at, issued_at, last_login) are generated so the world stays deterministic.
COLUMNS: dict[str, tuple[str, ...]] = {
    "sites": ("site_id", "name"),
    "buildings": ("building_id", "site_id", "name", "code"),
    "floors": ("building_id", "floor_code", "description"),
    "rooms": ("room_id", "building_id", "floor_code", "room_number", "room_type", "capacity"),
    "departments": ("dept_id", "name", "phone"),
    "people": ("person_id", "first_name", "last_name", "birth_date", "id_number", "updated_by"),
    "person_status": ("person_id", "status"),
    "directory_telephone": ("person_id", "tele_type", "phone_number"),
    "addresses": ("person_id", "addr_type", "street", "city", "state", "postal_code", "country"),
    "directory_orgn": ("person_id", "dept_id", "title"),
    "udi": ("person_id", "class_year", "web_page", "email"),
    "logins": ("username", "owner", "unixuid", "source", "admit_cohort", "shell", "last_login"),
    "unix_groups": ("group_name", "gid", "description"),
    "group_members": ("group_name", "username"),
    "person_merges": ("old_person_id", "new_person_id", "merged_at"),
    "vmail_commands": ("person_id", "mailbox", "command", "unity_owner", "system_owner", "issued_at"),
}

# Referenced tables before referencing ones: the order to load in (reverse it to drop).
TABLE_ORDER: tuple[str, ...] = tuple(COLUMNS)

# Primary key columns per table (positions in COLUMNS); identity-keyed tables have none here.
PRIMARY_KEYS: dict[str, tuple[str, ...]] = {
    "sites": ("site_id",),
    "buildings": ("building_id",),
    "floors": ("building_id", "floor_code"),
    "rooms": ("room_id",),
    "departments": ("dept_id",),
    "people": ("person_id",),
    "person_status": ("person_id",),
    "directory_telephone": ("person_id", "tele_type"),
    "addresses": ("person_id", "addr_type"),
    "directory_orgn": ("person_id", "dept_id"),
    "udi": ("person_id",),
    "logins": ("username",),
    "unix_groups": ("group_name",),
    "group_members": ("group_name", "username"),
}

FIRST_NAMES: tuple[str, ...] = (
    "James", "Mary", "Robert", "Patricia", "John", "Jennifer", "Michael", "Linda", "David", "Elizabeth",
    "William", "Barbara", "Richard", "Susan", "Joseph", "Jessica", "Thomas", "Sarah", "Christopher", "Karen",
    "Daniel", "Lisa", "Matthew", "Nancy", "Anthony", "Sandra", "Mark", "Ashley", "Steven", "Emily",
    "Andrew", "Michelle", "Joshua", "Amanda", "Kevin", "Melissa", "Brian", "Stephanie", "José", "María",
    "Juan", "Carmen", "Luis", "Sofía", "Carlos", "Valentina", "Miguel", "Lucía", "Mateo", "Camila",
    "Wei", "Mei", "Jian", "Xiu", "Hiroshi", "Yuki", "Kenji", "Sakura", "Min-jun", "Ji-woo",
    "Seo-yeon", "Hyun", "Arjun", "Priya", "Rahul", "Ananya", "Vikram", "Deepa", "Sanjay", "Lakshmi",
    "Mohammed", "Fatima", "Ahmed", "Aisha", "Omar", "Layla", "Yusuf", "Zainab", "Kwame", "Ama",
    "Chidi", "Ngozi", "Tunde", "Amara", "Olga", "Dmitri", "Anastasia", "Ivan", "Katarzyna", "Piotr",
    "Giulia", "Marco", "Francesca", "Lars", "Ingrid", "Sven", "Aoife", "Siobhán", "Thanh", "Linh",
)  # fmt: skip

LAST_NAMES: tuple[str, ...] = (
    "Smith", "Johnson", "Williams", "Brown", "Jones", "Garcia", "Miller", "Davis", "Rodriguez", "Martinez",
    "Hernández", "Lopez", "Gonzalez", "Wilson", "Anderson", "Taylor", "Moore", "Jackson", "Martin", "Lee",
    "Thompson", "White", "Harris", "Sanchez", "Clark", "Ramirez", "Lewis", "Robinson", "Walker", "Young",
    "Allen", "King", "Wright", "Scott", "Torres", "Nguyen", "Hill", "Flores", "Green", "Adams",
    "Nelson", "Baker", "Hall", "Rivera", "Campbell", "Mitchell", "Carter", "Roberts", "Wang", "Li",
    "Zhang", "Liu", "Chen", "Yang", "Huang", "Zhao", "Wu", "Zhou", "Kim", "Park",
    "Choi", "Jung", "Kang", "Tanaka", "Suzuki", "Takahashi", "Watanabe", "Yamamoto", "Patel", "Shah",
    "Singh", "Kumar", "Gupta", "Sharma", "Reddy", "Iyer", "Khan", "Hassan", "Ali", "Haddad",
    "Okafor", "Adeyemi", "Mensah", "Okonkwo", "Abebe", "Kowalski", "Nowak", "Ivanov", "Rossi", "Bianchi",
    "Müller", "Schmidt", "O'Brien", "Murphy", "Andersson", "Dubois", "Silva", "Oliveira", "Cohen", "Núñez",
)  # fmt: skip

SUBJECTS: tuple[str, ...] = (
    "Computer Science", "Mathematical Sciences", "Physics", "Chemistry", "Biology", "Economics",
    "Electrical Engineering", "Mechanical Engineering", "Civil Engineering", "Chemical Engineering",
    "Materials Science", "Biomedical Engineering", "Aerospace Engineering", "Nuclear Engineering",
    "Industrial Engineering", "Architecture", "Cognitive Science", "Philosophy", "History", "Literature",
    "Communication", "Arts", "Music", "Psychology", "Science and Technology Studies", "Earth Sciences",
    "Environmental Science", "Management", "Finance", "Accounting", "Information Technology",
    "Human Resources", "Admissions", "Financial Aid", "the Registrar", "Student Life", "Athletics",
    "Facilities", "Public Safety", "Libraries", "Research Computing", "Sponsored Research",
    "Alumni Relations", "Institutional Research", "Telecommunications", "Dining Services",
    "Residence Life", "Health Services", "Career Development", "Graduate Education",
)  # fmt: skip
DEPT_PREFIXES: tuple[str, ...] = (
    "Department of", "Office of", "Center for", "Institute for", "School of", "Division of",
)  # fmt: skip

BUILDING_KINDS: tuple[str, ...] = (
    "Hall", "Laboratory", "Center", "Library", "Annex", "House", "Building", "Pavilion",
)  # fmt: skip
ROOM_TYPES: tuple[tuple[str, int, tuple[int, int] | None], ...] = (
    # (type, weight, capacity range or None when the room seats nobody)
    ("Office", 40, (1, 4)),
    ("Classroom", 15, (20, 150)),
    ("Laboratory", 15, (8, 40)),
    ("Conference", 10, (6, 30)),
    ("Lounge", 5, (10, 40)),
    ("Storage", 10, None),
    ("Restroom", 5, None),
)

# (status, weight): ~40% employees of some kind, who get department affiliations.
STATUSES: tuple[tuple[str, int], ...] = (
    ("Student", 48),
    ("Faculty", 10),
    ("Staff", 18),
    ("Employee", 12),
    ("Alumni", 8),
    ("Affiliate", 4),
)
EMPLOYEE_STATUSES = frozenset({"Faculty", "Staff", "Employee"})
TITLES: dict[str, tuple[str, ...]] = {
    "Faculty": ("Professor", "Associate Professor", "Assistant Professor", "Lecturer", "Research Professor"),
    "Staff": ("Administrative Assistant", "Systems Programmer", "Program Coordinator", "Accountant", "Director"),
    "Employee": ("Research Engineer", "Technician", "Postdoctoral Researcher", "Custodian", "Groundskeeper"),
}

# (city, state, postal code, country, area code)
PLACES: tuple[tuple[str, str, str, str, str], ...] = (
    ("Troy", "NY", "12180", "US", "518"),
    ("Albany", "NY", "12203", "US", "518"),
    ("Schenectady", "NY", "12305", "US", "518"),
    ("Saratoga Springs", "NY", "12866", "US", "518"),
    ("New York", "NY", "10027", "US", "212"),
    ("Brooklyn", "NY", "11215", "US", "718"),
    ("Buffalo", "NY", "14201", "US", "716"),
    ("Boston", "MA", "02115", "US", "617"),
    ("Hartford", "CT", "06106", "US", "860"),
    ("Newark", "NJ", "07102", "US", "973"),
    ("Philadelphia", "PA", "19104", "US", "215"),
    ("Burlington", "VT", "05401", "US", "802"),
    ("Chicago", "IL", "60637", "US", "312"),
    ("Houston", "TX", "77005", "US", "713"),
    ("San Jose", "CA", "95112", "US", "408"),
    ("Seattle", "WA", "98105", "US", "206"),
    ("Montreal", "QC", "H3A 0G4", "CA", "514"),
    ("Toronto", "ON", "M5S 1A1", "CA", "416"),
)
STREETS: tuple[str, ...] = (
    "Main", "Oak", "Maple", "Pine", "Elm", "Washington", "Lake", "Hill", "Park", "River",
    "Broadway", "Congress", "Ferry", "Hoosick", "Pawling", "Peoples", "Sage", "Burdett", "College", "Spring",
)  # fmt: skip
STREET_SUFFIXES: tuple[str, ...] = ("Street", "Avenue", "Road", "Lane", "Drive", "Place", "Court")
RESIDENCE_HALLS: tuple[str, ...] = (
    "Barton Hall", "Nason Hall", "Bray Hall", "Cary Hall", "Crockett Hall", "Davison Hall",
    "Hall Hall", "Nugent Hall", "Sharp Hall", "Warren Hall", "Bryckwyck", "Quadrangle",
)  # fmt: skip
CAMPUS_ZIP = "12180"

SHELLS: tuple[tuple[str, int], ...] = (("/bin/bash", 60), ("/bin/tcsh", 25), ("/bin/zsh", 10), ("/bin/sh", 5))

# (name, description); gids are allocated from GID_BASE in this order.
GROUPS: tuple[tuple[str, str], ...] = (
    ("students", "All enrolled students"),
    ("faculty", "Teaching and research faculty"),
    ("staff", "Administrative and technical staff"),
    ("alumni", "Alumni who kept their accounts"),
    ("wheel", "System administrators"),
    ("dba", "Database administrators"),
    ("helpdesk", "Computer center help desk"),
    ("webmasters", "Departmental web page maintainers"),
    ("acm", "Student chapter of the ACM"),
    ("cs-lab", "Computer science laboratory users"),
    ("research", "Research computing cluster users"),
    ("physics", "Physics department computing"),
)
GID_BASE = 1000
DEPT_ID_BASE = 100
UID_BASE = 10000
TRANSFER_COHORT = "TR200209"  # transfer students admitted fall 2002

# Fixed anchors for generated timestamps: the world is "now" in 2004, never the clock.
_EPOCH_2004 = datetime(2004, 1, 1, tzinfo=UTC)
_EPOCH_2000 = datetime(2000, 1, 1, tzinfo=UTC)
_SECONDS_PER_YEAR = 365 * 24 * 3600


@dataclass(frozen=True)
class World:
    """A generated campus: per table, the rows to insert, in :data:`COLUMNS` order."""

    COLUMNS: ClassVar[dict[str, tuple[str, ...]]] = COLUMNS

    sites: list[Row]
    buildings: list[Row]
    floors: list[Row]
    rooms: list[Row]
    departments: list[Row]
    people: list[Row]
    person_status: list[Row]
    directory_telephone: list[Row]
    addresses: list[Row]
    directory_orgn: list[Row]
    udi: list[Row]
    logins: list[Row]
    unix_groups: list[Row]
    group_members: list[Row]
    person_merges: list[Row]
    vmail_commands: list[Row]

    def tables(self) -> dict[str, list[Row]]:
        """Table name -> rows, in FK-safe load order."""
        return {name: getattr(self, name) for name in TABLE_ORDER}

    def counts(self) -> dict[str, int]:
        """Table name -> number of rows, in FK-safe load order."""
        return {name: len(rows) for name, rows in self.tables().items()}


def _check_world_fields() -> None:
    # The dataclass and COLUMNS must name the same tables in the same order.
    if tuple(f.name for f in fields(World)) != TABLE_ORDER:
        raise AssertionError("World fields and COLUMNS disagree")


_check_world_fields()


def _weighted(rng: random.Random, choices: Sequence[tuple[str, int]]) -> str:
    return rng.choices([c for c, _ in choices], weights=[w for _, w in choices])[0]


def _ascii_letters(text: str) -> str:
    """'Núñez' -> 'nunez', "O'Brien" -> 'obrien': what a Unix username can hold."""
    plain = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii").lower()
    return re.sub(r"[^a-z]", "", plain)


def _unique(base: str, taken: dict[str, int], sep: str = "") -> str:
    """``base`` the first time, then ``base2``, ``base3``, ... (and never a name already used)."""
    n = taken.get(base, 0)
    while True:
        n += 1
        name = base if n == 1 else f"{base}{sep}{n}"
        if name not in taken:
            taken[base] = n
            taken.setdefault(name, 1)
            return name


def _phone(rng: random.Random, area: str, exchange: str | None = None) -> str:
    # North-American numbering: exchanges never start with 0 or 1.
    ex = exchange or str(rng.randint(200, 999))
    return f"+1 {area} {ex} {rng.randrange(10000):04d}"


def _random_date(rng: random.Random, first: date, last: date) -> date:
    return date.fromordinal(rng.randint(first.toordinal(), last.toordinal()))


def _timestamp(rng: random.Random, start: datetime, years: int) -> datetime:
    return start + timedelta(seconds=rng.randrange(years * _SECONDS_PER_YEAR))


def _space(rng: random.Random, people: int) -> tuple[list[Row], list[Row], list[Row], list[Row]]:
    """One site; buildings, floors and rooms in proportion to the population."""
    sites: list[Row] = [(1, "Troy Campus")]
    buildings: list[Row] = []
    floors: list[Row] = []
    rooms: list[Row] = []
    names = [f"{last} {kind}" for last in LAST_NAMES for kind in BUILDING_KINDS]
    rng.shuffle(names)
    name_taken: dict[str, int] = {}
    code_taken: dict[str, int] = {}
    room_types = [t for t, _, _ in ROOM_TYPES]
    room_weights = [w for _, w, _ in ROOM_TYPES]
    capacities = {t: cap for t, _, cap in ROOM_TYPES}
    room_id = 0
    for b in range(max(3, people // 400)):
        building_id = b + 1
        name = _unique(names[b % len(names)], name_taken, sep=" ")  # past 800 buildings names repeat with a number
        words = name.split()
        code = _unique((_ascii_letters(words[0])[:3] + words[1][0]).upper(), code_taken)
        buildings.append((building_id, 1, name, code))
        n_floors = rng.randint(2, 6)
        codes = (
            ["B", *(str(i) for i in range(1, n_floors))]
            if rng.random() < 0.3
            else [str(i) for i in range(1, n_floors + 1)]
        )
        for floor_code in codes:
            floors.append((building_id, floor_code, "Basement" if floor_code == "B" else f"Floor {floor_code}"))
            for r in range(1, rng.randint(5, 30) + 1):
                room_id += 1
                room_type = rng.choices(room_types, weights=room_weights)[0]
                cap = capacities[room_type]
                capacity = rng.randint(*cap) if cap else None
                rooms.append((room_id, building_id, floor_code, f"{floor_code}{r:02d}", room_type, capacity))
    return sites, buildings, floors, rooms


def _departments(rng: random.Random, people: int) -> list[Row]:
    """``max(5, people // 50)`` departments with unique names and campus phone numbers."""
    names = [f"{prefix} {subject}" for prefix in DEPT_PREFIXES for subject in SUBJECTS]
    rng.shuffle(names)
    taken: dict[str, int] = {}
    rows: list[Row] = []
    for i in range(max(5, people // 50)):
        # beyond the 300 combinations, numbered satellites ("Office of Physics 2") keep names unique
        name = _unique(names[i % len(names)], taken, sep=" ")
        rows.append((DEPT_ID_BASE + i, name, _phone(rng, "518", "276")))
    return rows


@dataclass
class _Person:
    person_id: int
    status: str
    username: str | None = None
    campus_phone: str | None = None


def generate(people: int, seed: int = 2004) -> World:
    """Generate a campus of ``people`` people; the same (people, seed) always gives the same world."""
    if people < 0:
        raise ValueError(f"people must be >= 0, not {people}")
    master = random.Random(seed)
    # Independent streams per part, each seeded from the master in a fixed order.
    space_rng, dept_rng, people_rng, group_rng, event_rng = (random.Random(master.getrandbits(64)) for _ in range(5))

    sites, buildings, floors, rooms = _space(space_rng, people)
    departments = _departments(dept_rng, people)
    dept_ids = [DEPT_ID_BASE + i for i in range(len(departments))]

    rng = people_rng
    people_rows: list[Row] = []
    status_rows: list[Row] = []
    phone_rows: list[Row] = []
    address_rows: list[Row] = []
    orgn_rows: list[Row] = []
    udi_rows: list[Row] = []
    login_rows: list[Row] = []
    persons: list[_Person] = []
    retired_ids: list[tuple[int, int]] = []  # (old id, the id it was merged into)
    id_numbers: set[str] = set()
    usernames: dict[str, int] = {}

    person_id = 660000
    for _ in range(people):
        person_id += 1
        if rng.random() < 0.01:
            # a duplicate record once created here was later merged away: leave its id as a gap
            retired_ids.append((person_id, person_id + 1))
            person_id += 1
        status = _weighted(rng, STATUSES)
        employee = status in EMPLOYEE_STATUSES
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        if status == "Student":
            birth = _random_date(rng, date(1976, 1, 1), date(1988, 12, 31))
        elif status == "Affiliate":
            # affiliates include dependants who hold ID cards, children among them
            birth = _random_date(rng, date(1940, 1, 1), date(2006, 12, 31))
        else:
            birth = _random_date(rng, date(1940, 1, 1), date(1984, 12, 31))
        while True:
            id_number = f"RIN{rng.randrange(10**9):09d}"
            if id_number not in id_numbers:
                id_numbers.add(id_number)
                break
        people_rows.append((person_id, first, last, birth, id_number, "world-generator"))
        status_rows.append((person_id, status))
        person = _Person(person_id, status)
        persons.append(person)

        home = rng.choice(PLACES)
        # employees always have a campus extension; fax only makes sense for offices
        pool = ["home", "mobile", "fax"] if employee else ["home", "mobile", "campus"]
        k = rng.randint(1, 3)
        tele_types = ["campus", *rng.sample(pool, k - 1)] if employee else rng.sample(pool, k)
        for tele_type in tele_types:
            if tele_type in ("campus", "fax"):
                number = _phone(rng, "518", "276")
            elif tele_type == "home":
                number = _phone(rng, home[4])
            else:
                number = _phone(rng, rng.choice(PLACES)[4])
            if tele_type == "campus":
                person.campus_phone = number
            phone_rows.append((person_id, tele_type, number))

        street = f"{rng.randint(1, 2999)} {rng.choice(STREETS)} {rng.choice(STREET_SUFFIXES)}"
        address_rows.append((person_id, "home", street, home[0], home[1], home[2], home[3]))
        if status == "Student" and rng.random() < 0.7:
            hall = f"{rng.choice(RESIDENCE_HALLS)} {rng.randint(1, 4)}{rng.randint(1, 40):02d}"
            address_rows.append((person_id, "campus", hall, "Troy", "NY", CAMPUS_ZIP, "US"))
        elif rng.random() < 0.2:
            box = f"PO Box {rng.randint(1, 9999)}"
            address_rows.append((person_id, "mailing", box, home[0], home[1], home[2], home[3]))

        if employee:
            for dept_id in rng.sample(dept_ids, 2 if rng.random() < 0.1 else 1):
                orgn_rows.append((person_id, dept_id, rng.choice(TITLES[status])))

        # everyone current has an account; some alumni and affiliates kept or got one
        has_login = status in ("Student", *EMPLOYEE_STATUSES) or rng.random() < (0.3 if status == "Alumni" else 0.5)
        class_year = rng.randint(2004, 2008) if status == "Student" else None
        if has_login:
            first_initial = _ascii_letters(first)[:1] or "x"
            username = _unique(first_initial + (_ascii_letters(last)[:7] or "user"), usernames)
            person.username = username
            if status == "Student":
                # about one student in ten transferred in; that is ~5% of all accounts
                cohort: str | None = TRANSFER_COHORT if rng.random() < 0.1 else f"FR{(class_year or 2004) - 4}09"
                source = "registrar"
            elif status == "Alumni":
                cohort, source = f"FR{rng.randint(1975, 1999)}09", "alumni"
            else:
                cohort, source = None, ("hr" if employee else "sponsor")
            last_login = _timestamp(rng, _EPOCH_2004, 1) if rng.random() < 0.9 else None
            uid = UID_BASE + len(login_rows)
            login_rows.append((username, person_id, uid, source, cohort, _weighted(rng, SHELLS), last_login))
        if status == "Student":
            email = f"{person.username}@campus.example" if person.username else None
            web = f"http://www.campus.example/~{person.username}/" if person.username and rng.random() < 0.3 else None
            udi_rows.append((person_id, class_year, web, email))

    unix_groups: list[Row] = [(name, GID_BASE + i, desc) for i, (name, desc) in enumerate(GROUPS)]
    member_rows = _memberships(group_rng, persons)

    merges: list[Row] = [(old, new, _timestamp(event_rng, _EPOCH_2000, 4)) for old, new in retired_ids]
    vmail: list[Row] = []
    for p in persons:
        if p.campus_phone and p.username and p.status in EMPLOYEE_STATUSES and event_rng.random() < 0.5:
            mailbox = "6" + p.campus_phone[-4:]  # Unity mailboxes are the five-digit campus extension
            vmail.append((p.person_id, mailbox, "add", p.username, "telecom", _timestamp(event_rng, _EPOCH_2004, 1)))

    return World(
        sites=sites,
        buildings=buildings,
        floors=floors,
        rooms=rooms,
        departments=departments,
        people=people_rows,
        person_status=status_rows,
        directory_telephone=phone_rows,
        addresses=address_rows,
        directory_orgn=orgn_rows,
        udi=udi_rows,
        logins=login_rows,
        unix_groups=unix_groups,
        group_members=member_rows,
        person_merges=merges,
        vmail_commands=vmail,
    )


def _memberships(rng: random.Random, persons: list[_Person]) -> list[Row]:
    """Group memberships by status, plus a few special-purpose groups drawn at random."""
    rows: list[Row] = []
    # (group, statuses eligible, probability) — the status groups hold everyone of that status
    rules: tuple[tuple[str, frozenset[str], float], ...] = (
        ("students", frozenset({"Student"}), 1.0),
        ("faculty", frozenset({"Faculty"}), 1.0),
        ("staff", frozenset({"Staff", "Employee"}), 1.0),
        ("alumni", frozenset({"Alumni"}), 1.0),
        ("wheel", frozenset({"Staff"}), 0.03),
        ("dba", frozenset({"Staff"}), 0.04),
        ("helpdesk", frozenset({"Staff", "Student"}), 0.03),
        ("webmasters", frozenset({"Staff", "Faculty", "Student"}), 0.03),
        ("acm", frozenset({"Student"}), 0.08),
        ("cs-lab", frozenset({"Student", "Faculty"}), 0.15),
        ("research", frozenset({"Faculty", "Employee", "Student"}), 0.1),
        ("physics", frozenset({"Faculty", "Student", "Employee"}), 0.05),
    )
    for p in persons:
        if p.username is None:
            continue
        for group, statuses, chance in rules:
            if p.status in statuses and (chance >= 1.0 or rng.random() < chance):
                rows.append((group, p.username))
    return rows


def iter_keys(world: World, table: str) -> Iterator[tuple[Value, ...]]:
    """The primary key of every row of ``table`` (tables keyed by identity have none)."""
    cols = COLUMNS[table]
    idx = [cols.index(c) for c in PRIMARY_KEYS[table]]
    for row in getattr(world, table):
        yield tuple(row[i] for i in idx)
